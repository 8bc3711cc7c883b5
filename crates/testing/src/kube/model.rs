//! The watch-decoding path end to end against a reference model: arbitrary bytes
//! as the body of a watch response, through kube-client, [`KubeListerWatcher`] and a [`Reflector`]
//! into a store.
//!
//! [`check`] serves the bytes from an in-process `kube::Client` (a tower `service_fn`, no
//! network): the reflector's first request, a list, gets an empty `ConfigMapList` at version `1`;
//! its second, the watch, gets the bytes as a chunked body; its third (a rewatch or relist after
//! that stream ended) never gets an answer, and the run stops there. A recording wrapper notes
//! every item the reflector pulled from the watch stream.
//!
//! [`expected`] decodes the same bytes independently, with `serde_json` and a plain description of
//! the wire format: lines end at `\n` (a trailing `\r` is dropped, the last line needs no `\n`);
//! each line is one event `{"type": ..., "object": ...}`. The properties [`check`] asserts:
//!
//! * nothing panics;
//! * the reflector pulls exactly the events of the decodable lines before the first bad line,
//!   then the bad line as a typed error ([`Error::Decode`] for anything that is not an event,
//!   [`Error::Api`] for a line that is a `Status`, [`WatchEvent::Error`] for an `ERROR` event),
//!   and nothing after it: lines after a bad line are never applied — the reflector drops that
//!   stream and resumes with a new watch from the last event it applied, where a real server
//!   sends them again;
//! * the store holds exactly those events applied in order to the (empty) list, and its
//!   resource version and the reflector's are those of the last applied event: no event is
//!   half-applied.
//!
//! One exception is kube-client's, and the model states it rather than hides it: a line that is a
//! *prefix* of valid JSON (JSON ended early, e.g. `{"type":"ADDED"`) is skipped without an error.
//! kube-client does that so that a last line torn by a closing connection ends the stream
//! quietly, but it applies to such a line anywhere in the stream.
//!
//! [`check`] runs every body twice: through a plain [`KubeListerWatcher`], and through one that
//! leaves `metadata.managedFields` out as it decodes
//! ([`KubeListerWatcher::without_managed_fields`]). The model of the second is the first's, on
//! each line with `object.metadata.managedFields` taken out of its JSON
//! ([`expected_without_managed_fields`]): where that line cannot be rewritten exactly (it is
//! not JSON, or rewriting it changes how the model decodes it: duplicate keys, an escaped key),
//! the model cannot say what skipping them does, and the second run is left out.
//!
//! The fuzz target (`fuzz/fuzz_targets/watch_decode.rs`) and the corpus replay test both call
//! [`check`]; it runs on one current-thread tokio runtime per thread, with a paused clock, built
//! once.
//!
//! ```
//! informer_testing::kube::model::check(b"{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"a\",\"resourceVersion\":\"2\"}}}\n");
//! ```

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use futures::StreamExt;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, StreamBody};
use informer_reflector::{
    Error, ListPage, ListParams, ListerWatcher, Reflector, WatchEvent, WatchParams, WatchStream,
};
use informer_store::{KnownObjects, Store, ThreadSafeStore};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use informer_kube::{INITIAL_EVENTS_END_ANNOTATION, KubeListerWatcher};

/// What the reflector pulled from the watch stream, one item per event or error.
#[derive(Debug, Clone, PartialEq)]
pub enum Seen {
    /// An `ADDED` event.
    Added(ConfigMap, String),
    /// A `MODIFIED` event.
    Modified(ConfigMap, String),
    /// A `DELETED` event.
    Deleted(ConfigMap, String),
    /// A `BOOKMARK` event: its version and initial-events-end flag.
    Bookmark(String, bool),
    /// An `ERROR` event: the status's code, reason and message.
    ErrorEvent(u16, String, String),
    /// [`Error::Api`]: a line that was a `Status`, not an event.
    Api(u16, String, String),
    /// [`Error::Decode`].
    Decode,
    /// Any other error (never expected from a body that arrives whole).
    Other(String),
}

impl Seen {
    fn of(item: &Result<WatchEvent<ConfigMap>, Error>) -> Self {
        match item {
            Ok(WatchEvent::Added {
                object,
                resource_version,
            }) => Self::Added((**object).clone(), resource_version.clone()),
            Ok(WatchEvent::Modified {
                object,
                resource_version,
            }) => Self::Modified((**object).clone(), resource_version.clone()),
            Ok(WatchEvent::Deleted {
                object,
                resource_version,
            }) => Self::Deleted((**object).clone(), resource_version.clone()),
            Ok(WatchEvent::Bookmark {
                resource_version,
                initial_events_end,
            }) => Self::Bookmark(resource_version.clone(), *initial_events_end),
            Ok(WatchEvent::Error(s)) => {
                Self::ErrorEvent(s.code, s.reason.clone(), s.message.clone())
            }
            Err(Error::Api(s)) => Self::Api(s.code, s.reason.clone(), s.message.clone()),
            Err(Error::Decode { .. }) => Self::Decode,
            Err(other) => Self::Other(format!("{other:?}")),
        }
    }

    /// Whether the reflector stops reading the stream at this item.
    fn ends_the_stream(&self) -> bool {
        !matches!(
            self,
            Self::Added(..) | Self::Modified(..) | Self::Deleted(..) | Self::Bookmark(..)
        )
    }
}

/// The model's view of the outcome: the items the reflector pulls and the state it leaves.
#[derive(Debug, Clone, PartialEq)]
pub struct Expected {
    /// The items pulled from the stream, up to and including the first error.
    pub seen: Vec<Seen>,
    /// The store's objects by key.
    pub objects: BTreeMap<String, ConfigMap>,
    /// The store's last synced resource version (the list's, or the last bookmark's).
    pub store_resource_version: String,
    /// The reflector's last synced resource version (the last applied event's).
    pub reflector_resource_version: String,
}

/// The resource version of the empty list the reflector starts from.
const LIST_RESOURCE_VERSION: &str = "1";

/// A watch line as the model reads it: a tagged event, with a `ConfigMap`, a bookmark or a
/// `Status` as its object.
#[derive(Deserialize)]
#[serde(tag = "type", content = "object")]
enum Line {
    #[serde(rename = "ADDED")]
    Added(ConfigMap),
    #[serde(rename = "MODIFIED")]
    Modified(ConfigMap),
    #[serde(rename = "DELETED")]
    Deleted(ConfigMap),
    #[serde(rename = "BOOKMARK")]
    Bookmark(BookmarkObject),
    #[serde(rename = "ERROR")]
    Error(StatusObject),
}

/// A bookmark's object. Its `apiVersion` and `kind` are a flattened part, as in kube-client's
/// type: that changes where the decoder stops on a bad line (a duplicated `kind` is then not an
/// error of its own), and so whether kube-client skips the line or reports it.
#[derive(Deserialize)]
struct BookmarkObject {
    #[serde(flatten)]
    #[allow(dead_code, reason = "required on the wire, unused")]
    types: TypeMeta,
    metadata: BookmarkMetadata,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TypeMeta {
    #[allow(dead_code, reason = "required on the wire, unused")]
    api_version: String,
    #[allow(dead_code, reason = "required on the wire, unused")]
    kind: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct BookmarkMetadata {
    resource_version: String,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
}

/// A `Status`: every field optional, but each of the right shape.
#[derive(Deserialize)]
struct StatusObject {
    #[serde(default)]
    #[allow(dead_code, reason = "checked on the wire, unused")]
    status: Option<StatusSummary>,
    #[serde(default)]
    code: u16,
    #[serde(default)]
    message: String,
    #[serde(default)]
    #[allow(dead_code, reason = "checked on the wire, unused")]
    metadata: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta>,
    #[serde(default)]
    reason: String,
    #[serde(default)]
    #[allow(dead_code, reason = "checked on the wire, unused")]
    details: Option<kube::core::response::StatusDetails>,
}

/// `status` of a `Status`: nothing else is one.
#[derive(Deserialize)]
enum StatusSummary {
    Success,
    Failure,
}

fn object_event(o: ConfigMap, make: fn(ConfigMap, String) -> Seen) -> Seen {
    match o.metadata.resource_version.clone() {
        Some(rv) if !rv.is_empty() => make(o, rv),
        _ => Seen::Decode,
    }
}

/// What one complete line decodes to; `None` for a line that is skipped.
fn decode_line(line: &[u8]) -> Option<Seen> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let Ok(text) = std::str::from_utf8(line) else {
        return Some(Seen::Decode);
    };
    Some(match serde_json::from_str::<Line>(text) {
        Ok(Line::Added(o)) => object_event(o, Seen::Added),
        Ok(Line::Modified(o)) => object_event(o, Seen::Modified),
        Ok(Line::Deleted(o)) => object_event(o, Seen::Deleted),
        Ok(Line::Bookmark(b)) if b.metadata.resource_version.is_empty() => Seen::Decode,
        Ok(Line::Bookmark(b)) => Seen::Bookmark(
            b.metadata.resource_version,
            b.metadata
                .annotations
                .get(INITIAL_EVENTS_END_ANNOTATION)
                .is_some_and(|v| v == "true"),
        ),
        Ok(Line::Error(s)) => Seen::ErrorEvent(s.code, s.reason, s.message),
        // JSON that ended early: kube-client skips it (see the module docs).
        Err(e) if e.is_eof() => return None,
        Err(_) => match serde_json::from_str::<StatusObject>(text) {
            // An empty status is how kube-client reports an event of an unknown type.
            Ok(s) if s.code == 0 && s.reason.is_empty() && s.message.is_empty() => Seen::Decode,
            Ok(s) => Seen::Api(s.code, s.reason, s.message),
            Err(_) => Seen::Decode,
        },
    })
}

fn key(o: &ConfigMap) -> Option<String> {
    let name = o.metadata.name.as_deref().filter(|n| !n.is_empty())?;
    Some(match o.metadata.namespace.as_deref() {
        Some(ns) if !ns.is_empty() => format!("{ns}/{name}"),
        _ => name.to_owned(),
    })
}

/// One line as the model decodes it for a lister-watcher that leaves the managed fields out:
/// the line with `object.metadata.managedFields` taken out of its JSON. `Err(())` where the
/// model cannot say (see the module docs).
fn decode_line_without_managed_fields(line: &[u8]) -> Result<Option<Seen>, ()> {
    let whole = decode_line(line);
    if may_name_managed_fields(line) {
        let text = line.strip_suffix(b"\r").unwrap_or(line);
        let mut value: serde_json::Value = serde_json::from_slice(text).map_err(|_| ())?;
        // The rewritten line must decode as the line itself does before anything is taken out.
        if decode_line(value.to_string().as_bytes()) != whole {
            return Err(());
        }
        if let Some(meta) = value
            .get_mut("object")
            .and_then(|o| o.get_mut("metadata"))
            .and_then(serde_json::Value::as_object_mut)
        {
            meta.remove("managedFields");
        }
        return Ok(decode_line(value.to_string().as_bytes()));
    }
    Ok(whole)
}

/// Whether a line may hold a `managedFields` key: the name itself, or an escape that could
/// spell it.
fn may_name_managed_fields(line: &[u8]) -> bool {
    line.contains(&b'\\') || line.windows(13).any(|w| w == b"managedFields")
}

/// Decodes `body` the model's way and applies it to the model's store (see the module docs).
pub fn expected(body: &[u8]) -> Expected {
    apply(body, |line| Ok(decode_line(line))).expect("the whole decoder is always modelled")
}

/// [`expected`] for a lister-watcher that leaves `metadata.managedFields` out; `None` where the
/// model cannot say (see the module docs).
pub fn expected_without_managed_fields(body: &[u8]) -> Option<Expected> {
    apply(body, decode_line_without_managed_fields).ok()
}

/// The lines of `body` decoded by `decode` and applied to the model's store.
fn apply(body: &[u8], decode: impl Fn(&[u8]) -> Result<Option<Seen>, ()>) -> Result<Expected, ()> {
    let mut out = Expected {
        seen: Vec::new(),
        objects: BTreeMap::new(),
        store_resource_version: LIST_RESOURCE_VERSION.to_owned(),
        reflector_resource_version: LIST_RESOURCE_VERSION.to_owned(),
    };
    let mut lines: Vec<&[u8]> = body.split(|b| *b == b'\n').collect();
    if lines.last().is_some_and(|l| l.is_empty()) {
        lines.pop();
    }
    for line in lines {
        let Some(seen) = decode(line)? else {
            continue;
        };
        match &seen {
            Seen::Added(o, rv) | Seen::Modified(o, rv) => {
                if let Some(k) = key(o) {
                    out.objects.insert(k, o.clone());
                }
                rv.clone_into(&mut out.reflector_resource_version);
            }
            Seen::Deleted(o, rv) => {
                if let Some(k) = key(o) {
                    out.objects.remove(&k);
                }
                rv.clone_into(&mut out.reflector_resource_version);
            }
            Seen::Bookmark(rv, _) => {
                rv.clone_into(&mut out.store_resource_version);
                rv.clone_into(&mut out.reflector_resource_version);
            }
            _ => {}
        }
        let end = seen.ends_the_stream();
        out.seen.push(seen);
        if end {
            break;
        }
    }
    Ok(out)
}

/// Wraps a lister-watcher and records every watch item the reflector pulls.
struct Recording<L> {
    inner: L,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl<L: ListerWatcher<ConfigMap>> ListerWatcher<ConfigMap> for Recording<L> {
    fn list(
        &self,
        params: &ListParams,
    ) -> impl Future<Output = Result<ListPage<ConfigMap>, Error>> + Send {
        self.inner.list(params)
    }

    fn watch(
        &self,
        params: &WatchParams,
    ) -> impl Future<Output = Result<WatchStream<ConfigMap>, Error>> + Send {
        let seen = Arc::clone(&self.seen);
        let watch = self.inner.watch(params);
        async move {
            let stream = watch.await?;
            Ok(stream
                .inspect(move |item| {
                    seen.lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(Seen::of(item));
                })
                .boxed())
        }
    }
    fn supports_streaming_list(&self) -> bool {
        self.inner.supports_streaming_list()
    }
}

type Body = BoxBody<Bytes, Infallible>;

/// The size of the chunks the body is served in: small enough that lines straddle chunks.
const CHUNK: usize = 61;

/// A client whose first request gets the empty list, second the watch body, and later ones no
/// answer (after notifying `done`).
fn client(body: Bytes, done: Arc<tokio::sync::Notify>) -> kube::Client {
    let requests = Arc::new(AtomicUsize::new(0));
    let service = tower::service_fn(move |_req: http::Request<kube::client::Body>| {
        let n = requests.fetch_add(1, Ordering::SeqCst);
        let body = body.clone();
        let done = Arc::clone(&done);
        async move {
            let chunks: Vec<Bytes> = match n {
                0 => vec![Bytes::from_static(
                    br#"{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[]}"#,
                )],
                1 => (0..body.len())
                    .step_by(CHUNK)
                    .map(|at| body.slice(at..body.len().min(at + CHUNK)))
                    .collect(),
                _ => {
                    done.notify_one();
                    std::future::pending::<()>().await;
                    unreachable!("a pending future never completes")
                }
            };
            let frames = chunks
                .into_iter()
                .map(|c| Ok::<_, Infallible>(http_body::Frame::data(c)));
            let body: Body = BodyExt::boxed(StreamBody::new(futures::stream::iter(frames)));
            Ok::<_, Infallible>(
                http::Response::builder()
                    .status(200)
                    .header("content-type", "application/json")
                    .body(body)
                    .expect("a valid response"),
            )
        }
    });
    kube::Client::new(service, "default")
}

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

/// Runs `body` through kube-client, the adapter and a reflector into a store and compares the
/// outcome with [`expected`]; then, where the model can say, through a lister-watcher that leaves
/// the managed fields out, compared with [`expected_without_managed_fields`].
///
/// # Panics
///
/// At any difference, or if any layer panics.
pub fn check(body: &[u8]) {
    compare(run(body, false), &expected(body), "decoded whole");
    if let Some(want) = expected_without_managed_fields(body) {
        compare(run(body, true), &want, "without managed fields");
    }
}

/// What a run left: the items pulled, the store's objects, its resource version and the
/// reflector's.
type Outcome = (Vec<Seen>, BTreeMap<String, ConfigMap>, String, String);

fn compare(got: Outcome, want: &Expected, mode: &str) {
    let (seen, objects, store_rv, reflector_rv) = got;
    assert_eq!(seen, want.seen, "the items the reflector pulled ({mode})");
    assert_eq!(objects, want.objects, "the store's objects ({mode})");
    assert_eq!(
        store_rv, want.store_resource_version,
        "the store's resource version ({mode})"
    );
    assert_eq!(
        reflector_rv, want.reflector_resource_version,
        "the reflector's resource version ({mode})"
    );
}

/// `body` through kube-client, the adapter (leaving the managed fields out if `skip`) and a
/// reflector into a store.
fn run(body: &[u8], skip: bool) -> Outcome {
    block_on(async {
        let done = Arc::new(tokio::sync::Notify::new());
        let api = Api::<ConfigMap>::all(client(Bytes::copy_from_slice(body), Arc::clone(&done)));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let lw = KubeListerWatcher::new(api);
        let lw = Recording {
            inner: if skip {
                lw.without_managed_fields()
            } else {
                lw
            },
            seen: Arc::clone(&seen),
        };
        let store = Arc::new(ThreadSafeStore::new(informer_kube::key_func::<ConfigMap>()));
        let reflector = Arc::new(
            Reflector::new(lw, Arc::clone(&store))
                .with_max_internal_error_retry(std::time::Duration::ZERO)
                .with_seed(0)
                .with_watch_error_handler(|_| {}),
        );
        let stop = CancellationToken::new();
        let run = tokio::spawn({
            let (reflector, stop) = (Arc::clone(&reflector), stop.clone());
            async move { reflector.run(stop).await }
        });
        done.notified().await;
        stop.cancel();
        run.await.expect("the reflector does not panic");
        let objects: BTreeMap<String, ConfigMap> = store
            .list_keys()
            .into_iter()
            .filter_map(|k| store.get_by_key(&k).map(|o| (k, (*o).clone())))
            .collect();
        let seen = std::mem::take(&mut *seen.lock().unwrap_or_else(PoisonError::into_inner));
        (
            seen,
            objects,
            store.last_sync_resource_version().unwrap_or_default(),
            reflector.last_sync_resource_version(),
        )
    })
}
