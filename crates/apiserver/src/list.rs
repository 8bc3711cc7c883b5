//! `GET <collection>`: resourceVersion semantics, pagination with continue tokens, selectors
//! (label, field and shard).

use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::codec::Output;
use crate::faults::RemainingItemCount;
use crate::query::{ListOptions, RequestedRv};
use crate::selector::{FieldSelector, LabelSelector};
use crate::shard::selects;
use crate::state::Shared;
use crate::status::StatusError;
use crate::storage::{ResourceState, Storage, StoredObject};

/// The continue token, in kube-apiserver's own format (so real tokens decode in tests).
#[derive(Serialize, Deserialize)]
struct ContinueToken {
    v: String,
    rv: i64,
    start: String,
}

const TOKEN_VERSION: &str = "meta.k8s.io/v1";

pub(crate) fn encode_continue(rv: i64, start: &str) -> String {
    let token = ContinueToken {
        v: TOKEN_VERSION.into(),
        rv,
        start: start.into(),
    };
    URL_SAFE_NO_PAD.encode(serde_json::to_vec(&token).unwrap_or_default())
}

pub(crate) fn decode_continue(token: &str) -> Result<(i64, String), StatusError> {
    let invalid = |why: &str| StatusError::bad_request(format!("invalid continue token: {why}"));
    let raw = URL_SAFE_NO_PAD
        .decode(token.trim_end_matches('='))
        .map_err(|e| invalid(&format!("continue key is not valid: {e}")))?;
    let token: ContinueToken = serde_json::from_slice(&raw)
        .map_err(|e| invalid(&format!("continue key is not valid: {e}")))?;
    if token.v != TOKEN_VERSION {
        return Err(invalid(
            "continue key is not valid: server does not recognize this encoded version",
        ));
    }
    if token.rv == 0 {
        return Err(invalid(
            "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)",
        ));
    }
    if token.start.is_empty() {
        return Err(invalid(
            "continue key is not valid: encoded start key empty (version meta.k8s.io/v1)",
        ));
    }
    if token.start.starts_with('/') || token.start.contains("/../") || token.start == ".." {
        return Err(invalid(
            "continue key is not valid: key must not escape the prefix",
        ));
    }
    Ok((token.rv, token.start))
}

/// Which revision a list reads.
enum Read {
    /// Consistent: the head.
    Current,
    /// The state exactly at a revision.
    Exact(u64),
    /// From the cache, once it is at least this new.
    NotOlderThan(u64),
    /// From the cache, whatever its revision (`"0"`).
    Cached(u64),
}

/// What a list reads: the revision, the page size (`None`: all, as a list at `"0"` ignores
/// `limit`), and the key a continued list starts from.
fn read_plan(
    opts: &ListOptions,
    requested: RequestedRv,
    limit: Option<usize>,
) -> Result<(Read, Option<usize>, Option<String>), StatusError> {
    if !opts.continue_token.is_empty() {
        if !matches!(requested, RequestedRv::Unset | RequestedRv::Zero) {
            return Err(StatusError::bad_request(
                "specifying resource version is not allowed when using continue",
            ));
        }
        let (rv, start) = decode_continue(&opts.continue_token)?;
        let read = if rv < 0 {
            Read::Current
        } else {
            Read::Exact(rv as u64)
        };
        return Ok((read, limit, Some(start)));
    }
    Ok(match (opts.resource_version_match.as_str(), requested) {
        (_, RequestedRv::Unset) => (Read::Current, limit, None),
        (_, RequestedRv::Zero) => (Read::Cached(0), None, None),
        ("Exact", RequestedRv::At(n)) => (Read::Exact(n), limit, None),
        ("", RequestedRv::At(n)) if limit.is_some() => (Read::Exact(n), limit, None),
        (_, RequestedRv::At(n)) => (Read::NotOlderThan(n), limit, None),
    })
}

/// One page of a list: its objects, the key of the last, and whether more follow.
struct Page<'s> {
    items: Vec<&'s Arc<StoredObject>>,
    last_key: &'s str,
    more: bool,
}

impl Shared {
    /// A list of resource `r` (in `namespace`, or all), as the document to answer with: the
    /// revision read, one page of the selected objects, and the continue token after it. In
    /// JSON, or in protobuf when `output` asks for it and the kind has a protobuf form.
    pub(crate) async fn list(
        &self,
        r: usize,
        namespace: Option<&str>,
        opts: &ListOptions,
        output: Output,
    ) -> Result<Listed, StatusError> {
        let (labels, fields) = self.selectors(r, opts)?;
        let requested = opts.requested_rv(self.config.codec())?;
        let limit = opts.limit.filter(|l| *l > 0).map(|l| l as usize);
        let (read, limit, start) = read_plan(opts, requested, limit)?;
        self.wait_for_cache(&read).await?;

        let storage = self.storage.read();
        storage.check_served(r)?;
        let at = self.read_revision(&storage, &read, start.as_deref())?;
        let state = storage.resource(r);
        let info = &state.info;
        // Token keys are relative to the request's prefix: `name\0` inside a namespace.
        let ns_prefix = namespace
            .filter(|_| info.namespaced)
            .map(|ns| format!("{ns}/"))
            .unwrap_or_default();
        let full_start = start.as_ref().map(|s| format!("{ns_prefix}{s}"));
        let typed = info.typed_list_items || self.config.list_items_typed;
        let shard = opts.shard.as_ref();
        let selective = !labels.is_empty() || !fields.is_empty() || shard.is_some();

        // The page's objects, found first and written once their size is known.
        let mut page = Page {
            items: Vec::with_capacity(limit.unwrap_or(64).min(4096)),
            last_key: "",
            more: false,
        };
        storage.visit_at(r, at, namespace, full_start.as_deref(), &mut |key, obj| {
            if limit.is_some_and(|l| page.items.len() >= l) {
                page.more = true;
                return false;
            }
            if !labels.matches(&obj.value)
                || !fields.matches(&obj.value)
                || !selects(shard, &obj.value)
            {
                return true;
            }
            page.items.push(obj);
            page.last_key = key;
            true
        });
        let count = page.items.len();

        let mut metadata = serde_json::Map::new();
        metadata.insert(
            "resourceVersion".into(),
            Value::String(self.config.codec().encode(at)),
        );
        if page.more && count > 0 {
            let last_key = page.last_key;
            let relative = last_key.strip_prefix(&ns_prefix).unwrap_or(last_key);
            let token_rv = i64::try_from(at).unwrap_or(i64::MAX);
            metadata.insert(
                "continue".into(),
                Value::String(encode_continue(token_rv, &format!("{relative}\u{0}"))),
            );
            if !selective {
                // Only without selectors: with them the count would not be of matching items.
                let previous = full_start.as_deref().and_then(|s| s.strip_suffix('\0'));
                let remaining =
                    storage.remaining_after(r, at, namespace, previous, count as u64, last_key);
                if let Some(remaining) = self.remaining_item_count(remaining) {
                    metadata.insert("remainingItemCount".into(), remaining);
                }
            }
        }
        if let Some(shard) = shard {
            // On every page: the client learns from each that the server filtered it.
            metadata.insert("shardInfo".into(), shard.info());
        }
        Ok(write_page(state, metadata, &page.items, typed, output))
    }

    /// The label and field selectors of a list of resource `r`; 400 when one does not parse.
    fn selectors(
        &self,
        r: usize,
        opts: &ListOptions,
    ) -> Result<(LabelSelector, FieldSelector), StatusError> {
        let storage = self.storage.read();
        let info = &storage.resource(r).info;
        let labels =
            LabelSelector::parse(&opts.label_selector).map_err(StatusError::bad_request)?;
        let fields =
            FieldSelector::parse(&opts.field_selector, info).map_err(StatusError::bad_request)?;
        Ok((labels, fields))
    }

    /// Waits until the watch cache has the revision a read from it (or an exact read) needs.
    async fn wait_for_cache(&self, read: &Read) -> Result<(), StatusError> {
        let cached = self.cache_revision(&self.storage.read());
        match *read {
            Read::Exact(n) | Read::NotOlderThan(n) | Read::Cached(n) if n > cached => {
                self.wait_for_revision(n).await
            }
            _ => Ok(()),
        }
    }

    /// The revision a list reads at, once the cache has what it needs; an exact read below
    /// the history floor is 410 (a continued list's error carries the token to restart with).
    fn read_revision(
        &self,
        storage: &Storage,
        read: &Read,
        start: Option<&str>,
    ) -> Result<u64, StatusError> {
        Ok(match *read {
            Read::Current => storage.head,
            Read::NotOlderThan(_) | Read::Cached(_) => self.cache_revision(storage),
            Read::Exact(n) if n < storage.floor => {
                return Err(match start {
                    Some(start) => StatusError::continue_expired(Some(encode_continue(-1, start))),
                    None => StatusError::list_too_old(),
                });
            }
            Read::Exact(n) => n.min(storage.head),
        })
    }

    /// The `remainingItemCount` a page says for `remaining` items after it, as the injected
    /// fault has it: the count, none, or a count off on purpose.
    fn remaining_item_count(&self, remaining: u64) -> Option<Value> {
        match self.faults.lock().remaining_item_count {
            RemainingItemCount::Exact => Some(Value::from(remaining)),
            RemainingItemCount::Omitted => None,
            RemainingItemCount::Off(by) => {
                let wrong = i64::try_from(remaining)
                    .unwrap_or(i64::MAX)
                    .saturating_add(by);
                Some(Value::from(wrong))
            }
        }
    }
}

/// A list response body.
pub(crate) enum Listed {
    /// The JSON document.
    Json(Bytes),
    /// The protobuf envelope.
    #[cfg(feature = "protobuf")]
    Protobuf(Vec<u8>),
}

impl Listed {
    /// The JSON document; `None` for a protobuf one.
    pub(crate) fn json(self) -> Option<Bytes> {
        match self {
            Listed::Json(bytes) => Some(bytes),
            #[cfg(feature = "protobuf")]
            Listed::Protobuf(_) => None,
        }
    }
}

/// The page in the negotiated encoding: protobuf from the objects' cached messages when asked
/// for and the kind has a protobuf form, else JSON.
fn write_page(
    state: &ResourceState,
    metadata: serde_json::Map<String, Value>,
    items: &[&Arc<StoredObject>],
    typed: bool,
    output: Output,
) -> Listed {
    #[cfg(feature = "protobuf")]
    if output == Output::Protobuf {
        let info = &state.info;
        let list = crate::protobuf::encode_list(
            &info.api_version(),
            &info.kind,
            &info.list_kind,
            &metadata,
            items,
        );
        if let Some(bytes) = list {
            return Listed::Protobuf(bytes);
        }
    }
    let _ = output;
    Listed::Json(write_list(state, metadata, items, typed))
}

/// The list document: `kind`, `apiVersion`, `metadata` and the page's `items`, written in one
/// allocation of the right size.
fn write_list(
    state: &ResourceState,
    metadata: serde_json::Map<String, Value>,
    items: &[&Arc<StoredObject>],
    typed: bool,
) -> Bytes {
    let info = &state.info;
    let head = format!(
        "{{\"kind\":{},\"apiVersion\":{},\"metadata\":{},\"items\":[",
        Value::from(info.list_kind.as_str()),
        Value::from(info.api_version()),
        Value::Object(metadata),
    );
    let typed_extra = if typed { state.typed_prefix.len() } else { 0 };
    let size = head.len()
        + items
            .iter()
            .map(|obj| obj.body.len() + typed_extra + 1)
            .sum::<usize>()
        + 2;
    let mut out = Vec::with_capacity(size);
    out.extend_from_slice(head.as_bytes());
    write_items(&mut out, items, typed.then_some(&state.typed_prefix[..]));
    out.extend_from_slice(b"]}");
    Bytes::from(out)
}

/// Appends the stored bodies of `items` to `out`, comma-separated; with `typed`
/// (`{"kind":..,"apiVersion":..,`), each with its `kind` and `apiVersion`.
fn write_items(out: &mut Vec<u8>, items: &[&Arc<StoredObject>], typed: Option<&[u8]>) {
    for (i, obj) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        match typed {
            Some(prefix) => crate::storage::write_typed(out, prefix, &obj.body),
            None => out.extend_from_slice(&obj.body),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continue_tokens_round_trip_in_the_kube_apiserver_format() {
        let token = encode_continue(5021, "demo/web-b\u{0}");
        let raw = URL_SAFE_NO_PAD.decode(&token).unwrap();
        let json: Value = serde_json::from_slice(&raw).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"v": "meta.k8s.io/v1", "rv": 5021, "start": "demo/web-b\u{0}"})
        );
        assert_eq!(
            decode_continue(&token).unwrap(),
            (5021, "demo/web-b\u{0}".into())
        );
        for bad in [
            "%%%",
            "e30",
            &encode_continue(0, "a"),
            &encode_continue(3, ""),
        ] {
            let err = decode_continue(bad).unwrap_err();
            assert_eq!(err.code(), 400, "{bad}");
            assert!(err.message().starts_with("invalid continue token"), "{err}");
        }
    }

    #[test]
    fn written_items_are_the_json_array_serde_json_makes_of_them() {
        let values = [
            serde_json::json!({"metadata": {"name": "a", "labels": {"x": "\"q\""}}, "spec": {}}),
            serde_json::json!({}),
            serde_json::json!({"metadata": {"name": "c\u{e9}"}, "data": [1, 2.5, null]}),
        ];
        let stored: Vec<Arc<StoredObject>> = values
            .iter()
            .map(|v| Arc::new(StoredObject::new(v.clone())))
            .collect();
        let refs: Vec<&Arc<StoredObject>> = stored.iter().collect();

        let mut out = b"[".to_vec();
        write_items(&mut out, &refs, None);
        out.push(b']');
        assert_eq!(out, serde_json::to_vec(&values).unwrap());

        let prefix = br#"{"kind":"Pod","apiVersion":"v1","#;
        let mut out = b"[".to_vec();
        write_items(&mut out, &refs, Some(prefix));
        out.push(b']');
        let typed: Vec<Value> = values
            .iter()
            .map(|v| {
                let mut v = v.clone();
                v["kind"] = "Pod".into();
                v["apiVersion"] = "v1".into();
                v
            })
            .collect();
        assert_eq!(
            serde_json::from_slice::<Value>(&out).unwrap(),
            Value::from(typed)
        );
        // `kind` and `apiVersion` come first, as kube-apiserver writes them.
        assert!(out[1..].starts_with(prefix));

        let mut out = Vec::new();
        write_items(&mut out, &[], Some(prefix));
        assert!(out.is_empty());
    }
}
