//! Checks of the request parsing on arbitrary input (feature `fuzzing`): query parameters,
//! label and field selectors, continue tokens, and whole HTTP requests through the router.
//!
//! Not part of the simulator's API: it exists so that the `apiserver_request` fuzz target
//! (`fuzz/`) and the corpus replay test share one harness. [`check`] decodes the bytes (the first
//! byte picks a check, the rest is its input) and panics when a property fails:
//!
//! * **query**: any query string parses to options or is a 400 `BadRequest`; its `shardSelector`
//!   decodes or is a 400; validation passes or is a 422 `Invalid`; `resourceVersion` is unset,
//!   `"0"`, a number, or a 400.
//! * **label selector**: any string parses or is refused, without a panic; a selector built from
//!   the bytes (every operator, optional spaces) always parses and selects exactly what a tiny
//!   model matcher selects, on label sets also built from the bytes.
//! * **field selector**: the same, with escaped `\,`, `\=` and `\\` in values.
//! * **continue token**: any token decodes or is a 400; a token the server encodes decodes to the
//!   position it was made from.
//! * **HTTP**: a request (method, path and query, content type, body) through the real router, in
//!   process (`tower::ServiceExt::oneshot`), against a server holding three config maps. Never a
//!   panic; an error is always a JSON `Status` whose code is the HTTP status, never a 500 (except
//!   kube-apiserver's own 500 for a create that sets `resourceVersion`); a successful list is a
//!   JSON list, and its continue token, sent back, yields the next page, strictly after this one.
//!
//! ```
//! // A query string (check 0), a label selector (check 1).
//! informer_apiserver::fuzzing::check(b"\x00watch=1&resourceVersion=x&limit=-1");
//! informer_apiserver::fuzzing::check(b"\x01app in (web,db),!tier");
//! ```

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use serde_json::{Value, json};
use tower::ServiceExt;

use crate::config::Config;
use crate::list::{decode_continue, encode_continue};
use crate::objects::Target;
use crate::query::ListOptions;
use crate::resource::ResourceInfo;
use crate::router::router;
use crate::selector::{FieldSelector, LabelSelector};
use crate::state::Shared;

/// Runs the check the first byte picks on the rest (see the module docs).
///
/// # Panics
///
/// When a property fails.
pub fn check(data: &[u8]) {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    match which % 7 {
        0 => query(&String::from_utf8_lossy(rest)),
        1 => label_selector_text(&String::from_utf8_lossy(rest)),
        2 => label_selector_model(rest),
        3 => field_selector_text(&String::from_utf8_lossy(rest)),
        4 => field_selector_model(rest),
        5 => continue_token(rest),
        _ => http(rest),
    }
}

fn query(q: &str) {
    let mut opts = match ListOptions::parse(q) {
        Ok(opts) => opts,
        Err(e) => {
            assert_eq!((e.code(), e.reason()), (400, "BadRequest"), "{q:?}: {e}");
            return;
        }
    };
    if let Err(e) = opts.decode_shard_selector(crate::ShardSelectorSupport::Served) {
        assert_eq!((e.code(), e.reason()), (400, "BadRequest"), "{q:?}: {e}");
    }
    if let Err(e) = opts.validate() {
        assert_eq!((e.code(), e.reason()), (422, "Invalid"), "{q:?}: {e}");
    }
    if let Err(e) = opts.requested_rv(crate::storage::RvCodec::default()) {
        assert_eq!((e.code(), e.reason()), (400, "BadRequest"), "{q:?}: {e}");
    }
}

const LABEL_KEYS: [&str; 4] = ["app", "tier", "example.com/team", "n"];
const LABEL_VALUES: [&str; 6] = ["web", "db", "", "5", "10", "x.y_z-1"];

fn label_sets(bytes: &[u8]) -> Vec<BTreeMap<&'static str, &'static str>> {
    let mut sets: Vec<_> = bytes
        .chunks(2)
        .map(|pair| {
            let bits = u16::from(pair[0]) | (u16::from(*pair.get(1).unwrap_or(&0)) << 8);
            LABEL_KEYS
                .iter()
                .enumerate()
                .filter_map(|(i, k)| {
                    let pick = usize::from((bits >> (i * 3)) & 0b111);
                    LABEL_VALUES.get(pick).map(|v| (*k, *v))
                })
                .collect()
        })
        .collect();
    sets.push(BTreeMap::new());
    sets
}

fn labels_object(labels: &BTreeMap<&str, &str>) -> Value {
    json!({"metadata": {"name": "o", "labels": labels}})
}

fn label_selector_text(s: &str) {
    if let Ok(selector) = LabelSelector::parse(s) {
        for labels in label_sets(s.as_bytes()) {
            selector.matches(&labels_object(&labels));
        }
    }
}

/// One requirement of the model label selector.
#[derive(Debug)]
enum Requirement {
    Exists(&'static str),
    DoesNotExist(&'static str),
    Equals(&'static str, &'static str, bool),
    NotEquals(&'static str, &'static str),
    In(&'static str, Vec<&'static str>),
    NotIn(&'static str, Vec<&'static str>),
    GreaterThan(&'static str, i64),
    LessThan(&'static str, i64),
}

impl Requirement {
    fn decode(a: u8, b: u8) -> Self {
        let key = LABEL_KEYS[usize::from(a >> 3) % LABEL_KEYS.len()];
        let value = LABEL_VALUES[usize::from(b) % LABEL_VALUES.len()];
        let set = || -> Vec<&'static str> {
            let picked: Vec<_> = LABEL_VALUES
                .iter()
                .enumerate()
                .filter(|&(i, _)| b & (1 << (i + 1)) != 0)
                .map(|(_, v)| *v)
                .collect();
            if picked.is_empty() {
                vec![value]
            } else {
                picked
            }
        };
        let number = i64::from(b % 12);
        match a % 8 {
            0 => Self::Exists(key),
            1 => Self::DoesNotExist(key),
            2 => Self::Equals(key, value, b & 0x80 != 0),
            3 => Self::NotEquals(key, value),
            4 => Self::In(key, set()),
            5 => Self::NotIn(key, set()),
            6 => Self::GreaterThan(key, number),
            _ => Self::LessThan(key, number),
        }
    }

    fn render(&self, space: &str) -> String {
        match self {
            Self::Exists(k) => (*k).to_owned(),
            Self::DoesNotExist(k) => format!("!{space}{k}"),
            Self::Equals(k, v, double) => {
                format!("{k}{space}{}{space}{v}", if *double { "==" } else { "=" })
            }
            Self::NotEquals(k, v) => format!("{k}{space}!={space}{v}"),
            Self::In(k, vs) => format!("{k} in{space}({})", vs.join(&format!(",{space}"))),
            Self::NotIn(k, vs) => format!("{k} notin{space}({})", vs.join(",")),
            Self::GreaterThan(k, n) => format!("{k}{space}>{space}{n}"),
            Self::LessThan(k, n) => format!("{k}<{n}"),
        }
    }

    /// The meaning of a requirement, written out plainly (`k8s.io/apimachinery/pkg/labels`).
    fn matches(&self, labels: &BTreeMap<&str, &str>) -> bool {
        let number = |k: &str| labels.get(k).and_then(|v| v.parse::<i64>().ok());
        match self {
            Self::Exists(k) => labels.contains_key(k),
            Self::DoesNotExist(k) => !labels.contains_key(k),
            Self::Equals(k, v, _) => labels.get(k) == Some(v),
            Self::NotEquals(k, v) => labels.get(k) != Some(v),
            Self::In(k, vs) => labels.get(k).is_some_and(|x| vs.contains(x)),
            Self::NotIn(k, vs) => labels.get(k).is_none_or(|x| !vs.contains(x)),
            Self::GreaterThan(k, n) => number(k).is_some_and(|x| x > *n),
            Self::LessThan(k, n) => number(k).is_some_and(|x| x < *n),
        }
    }
}

fn label_selector_model(bytes: &[u8]) {
    let (head, tail) = bytes.split_at(bytes.len().min(16));
    let requirements: Vec<Requirement> = head
        .chunks_exact(2)
        .map(|p| Requirement::decode(p[0], p[1]))
        .collect();
    let space = if bytes.first().is_some_and(|b| b & 4 != 0) {
        " "
    } else {
        ""
    };
    let text = requirements
        .iter()
        .map(|r| r.render(space))
        .collect::<Vec<_>>()
        .join(&format!("{space},{space}"));
    let selector = LabelSelector::parse(&text)
        .unwrap_or_else(|e| panic!("{text:?} ({requirements:?}) did not parse: {e}"));
    assert_eq!(selector.is_empty(), requirements.is_empty(), "{text:?}");
    for labels in label_sets(tail) {
        let want = requirements.iter().all(|r| r.matches(&labels));
        assert_eq!(
            selector.matches(&labels_object(&labels)),
            want,
            "{text:?} on {labels:?}"
        );
    }
}

fn config_maps() -> ResourceInfo {
    ResourceInfo::of::<k8s_openapi::api::core::v1::ConfigMap>()
}

fn field_selector_text(s: &str) {
    if let Ok(selector) = FieldSelector::parse(s, &config_maps()) {
        selector.required_name();
        for name in FIELD_VALUES {
            selector.matches(&json!({"metadata": {"name": name, "namespace": s}}));
        }
    }
}

const FIELD_LABELS: [&str; 2] = ["metadata.name", "metadata.namespace"];
const FIELD_VALUES: [&str; 6] = ["web", "", "a,b", "x=y", "back\\slash", "é"];

fn escape_field_value(v: &str) -> String {
    let mut out = String::new();
    for c in v.chars() {
        if matches!(c, '\\' | ',' | '=') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn field_selector_model(bytes: &[u8]) {
    let (head, tail) = bytes.split_at(bytes.len().min(8));
    // (label, value, equal, operator text)
    let terms: Vec<(&str, &str, bool, &str)> = head
        .iter()
        .map(|&b| {
            let (equal, op) = match b % 3 {
                0 => (true, "="),
                1 => (true, "=="),
                _ => (false, "!="),
            };
            (
                FIELD_LABELS[usize::from(b >> 2) % 2],
                FIELD_VALUES[usize::from(b >> 3) % FIELD_VALUES.len()],
                equal,
                op,
            )
        })
        .collect();
    let text = terms
        .iter()
        .map(|(l, v, _, op)| format!("{l}{op}{}", escape_field_value(v)))
        .collect::<Vec<_>>()
        .join(",");
    let selector = FieldSelector::parse(&text, &config_maps())
        .unwrap_or_else(|e| panic!("{text:?} did not parse: {e}"));
    let pick = |b: u8| FIELD_VALUES.get(usize::from(b) % 8).copied();
    let mut objects: Vec<(Option<&str>, Option<&str>)> = tail
        .chunks(2)
        .map(|p| (pick(p[0]), pick(*p.get(1).unwrap_or(&7))))
        .collect();
    objects.push((None, None));
    for (name, namespace) in objects {
        let mut metadata = serde_json::Map::new();
        if let Some(n) = name {
            metadata.insert("name".into(), n.into());
        }
        if let Some(ns) = namespace {
            metadata.insert("namespace".into(), ns.into());
        }
        let object = json!({ "metadata": metadata });
        let want = terms.iter().all(|(label, value, equal, _)| {
            let actual = if *label == "metadata.name" {
                name
            } else {
                namespace
            };
            (actual.unwrap_or("") == *value) == *equal
        });
        assert_eq!(selector.matches(&object), want, "{text:?} on {object}");
    }
}

fn continue_token(bytes: &[u8]) {
    let text = String::from_utf8_lossy(bytes);
    if let Err(e) = decode_continue(&text) {
        assert_eq!((e.code(), e.reason()), (400, "BadRequest"), "{text:?}: {e}");
    }
    // A token the server makes: a revision and the key to start after.
    if let Some((rv, start)) = bytes.split_first_chunk::<8>() {
        let rv = i64::from_le_bytes(*rv).checked_abs().unwrap_or(1).max(1);
        let start = String::from_utf8_lossy(start);
        let token = encode_continue(rv, &start);
        let escapes = start.starts_with('/') || start.contains("/../") || start == "..";
        match decode_continue(&token) {
            Ok(decoded) => assert_eq!(decoded, (rv, start.into_owned()), "{token}"),
            Err(e) => assert!(
                start.is_empty() || escapes,
                "{token} (made from {rv}, {start:?}) did not decode: {e}"
            ),
        }
    }
}

const METHODS: [Method; 5] = [
    Method::GET,
    Method::POST,
    Method::PUT,
    Method::PATCH,
    Method::DELETE,
];
const CONTENT_TYPES: [&str; 4] = [
    "application/json",
    "application/merge-patch+json",
    "text/plain",
    "application/strategic-merge-patch+json; charset=utf-8",
];

thread_local! {
    static RUNTIME: RefCell<Option<tokio::runtime::Runtime>> = const { RefCell::new(None) };
}

fn block_on<F: Future>(f: F) -> F::Output {
    RUNTIME.with(|rt| {
        let mut rt = rt.borrow_mut();
        let rt = rt.get_or_insert_with(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .start_paused(true)
                .build()
                .expect("a tokio runtime")
        });
        rt.block_on(f)
    })
}

/// A server (state and router, no socket) holding three labelled config maps in `demo`.
fn server() -> Arc<Shared> {
    let shared = Shared::new(Config::for_tests(Duration::from_secs(5)).with_core_types());
    let resource = shared
        .storage
        .read()
        .lookup("", "v1", "configmaps")
        .expect("config maps are registered");
    for (name, app) in [("a", "web"), ("b", "db"), ("c", "web")] {
        shared
            .create(
                Target {
                    resource,
                    namespace: Some("demo"),
                },
                json!({"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": name, "namespace": "demo", "labels": {"app": app}}}),
            )
            .expect("a valid config map");
    }
    shared
}

/// The create that kube-apiserver itself answers with a 500.
const CREATE_WITH_RESOURCE_VERSION: &str =
    "resourceVersion should not be set on objects to be created";

async fn send(
    shared: &Arc<Shared>,
    method: Method,
    uri: &str,
    content_type: &str,
    body: Vec<u8>,
) -> Option<(StatusCode, Option<Value>)> {
    let request = Request::builder()
        .method(method)
        .uri(uri)
        .header(header::CONTENT_TYPE, content_type)
        .body(Body::from(body))
        // Not a request hyper would hand to the server.
        .ok()?;
    let response = router(shared)
        .oneshot(request)
        .await
        .unwrap_or_else(|never| match never {});
    let status = response.status();
    // A watch streams until its timeout; the paused clock gets there at once, but bound it.
    let body = tokio::time::timeout(
        Duration::from_secs(4 * 3600),
        axum::body::to_bytes(response.into_body(), usize::MAX),
    )
    .await
    .ok()
    .and_then(Result::ok);
    let value: Option<Value> = body.as_ref().and_then(|b| serde_json::from_slice(b).ok());
    if !status.is_success() {
        let status_json = value
            .as_ref()
            .unwrap_or_else(|| panic!("{uri}: {status} without a JSON Status body"));
        assert_eq!(status_json["kind"], "Status", "{uri}: {status_json}");
        assert_eq!(
            status_json["code"],
            status.as_u16(),
            "{uri}: {status} {status_json}"
        );
        assert!(
            status != StatusCode::INTERNAL_SERVER_ERROR
                || status_json["message"]
                    .as_str()
                    .is_some_and(|m| m.contains(CREATE_WITH_RESOURCE_VERSION)),
            "{uri}: a 500 for bad input: {status_json}"
        );
    }
    Some((status, value))
}

fn item_keys(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .map(|o| {
                    let m = &o["metadata"];
                    format!(
                        "{}/{}",
                        m["namespace"].as_str().unwrap_or(""),
                        m["name"].as_str().unwrap_or("")
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn http(bytes: &[u8]) {
    let Some((&head, rest)) = bytes.split_first() else {
        return;
    };
    // The low three bits pick the method, the next two the content type.
    let method = METHODS[usize::from(head & 7) % METHODS.len()].clone();
    let content_type = CONTENT_TYPES[usize::from(head >> 3) % CONTENT_TYPES.len()];
    let (uri, body) = match rest.iter().position(|b| *b == b'\n') {
        Some(at) => (&rest[..at], rest[at + 1..].to_vec()),
        None => (rest, Vec::new()),
    };
    let uri = String::from_utf8_lossy(uri).into_owned();
    block_on(async {
        let shared = server();
        let is_list = method == Method::GET;
        let Some((status, value)) = send(&shared, method, &uri, content_type, body).await else {
            return;
        };
        // Follow a continue token: the next page starts strictly after this one.
        let Some(list) = value.filter(|_| is_list && status == StatusCode::OK) else {
            return;
        };
        let Some(token) = list["metadata"]["continue"]
            .as_str()
            .filter(|t| !t.is_empty())
        else {
            return;
        };
        let (path, query) = uri.split_once('?').unwrap_or((&uri, ""));
        let kept: String = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(form_urlencoded::parse(query.as_bytes()).filter(|(k, _)| {
                k != "continue" && k != "resourceVersion" && k != "resourceVersionMatch"
            }))
            .append_pair("continue", token)
            .finish();
        let next_uri = format!("{path}?{kept}");
        let (next_status, next) = send(
            &shared,
            Method::GET,
            &next_uri,
            "application/json",
            Vec::new(),
        )
        .await
        .unwrap_or_else(|| panic!("{next_uri}: not a valid request"));
        assert_eq!(next_status, StatusCode::OK, "{next_uri}: {next:?}");
        let (before, after) = (item_keys(&list), item_keys(&next.unwrap_or_default()));
        if let (Some(last), Some(first)) = (before.last(), after.first()) {
            assert!(
                first > last,
                "{next_uri}: page after {before:?} is {after:?}"
            );
        }
    });
}
