//! W-HTTP, client only: a server that costs almost nothing. Every response of the run is
//! encoded before the clock starts (the list pages, the watch stream) and served from memory,
//! the same bytes for both sides, so the figure is the client's: HTTP, framing, decoding, and
//! the informer behind them.
//!
//! The server answers `GET /api/v1/pods`:
//!
//! * a list (no `watch`): page `continue` (the page number; the first without one) of
//!   [`PAGE`] pods, whatever the `limit` and `resourceVersion` (both sides ask for pages of
//!   500);
//! * a watch: every event, encoded as kube-apiserver does (one JSON object per line), then the
//!   stream stays open until the server stops (a watch that ended would be re-established and
//!   replayed). Watches are held back at the client's [`WatchGate`](crate::w_http::WatchGate),
//!   as in the W-HTTP figure with the simulator.

use std::convert::Infallible;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::w_inf::Data;

/// Pods per list page (client-go's and kube-runtime's default page size).
pub const PAGE: usize = 500;

/// The bytes of every response, encoded once.
#[derive(Debug)]
pub struct Encoded {
    /// The list pages, in order.
    pub pages: Vec<Bytes>,
    /// The watch stream: every event, one line each, cut in chunks as a server writes them.
    pub watch: Vec<Bytes>,
    /// The same responses as protobuf, if encoded ([`with_protobuf`](Self::with_protobuf)):
    /// served to a request whose `Accept` names protobuf.
    pub protobuf: Option<(Vec<Bytes>, Vec<Bytes>)>,
}

/// The size of the watch stream's chunks (about what a server's writes put on the wire).
const CHUNK: usize = 32 * 1024;

impl Encoded {
    /// The pages and the watch stream of `data` (the list at resource version `listed`).
    pub fn new(data: &Data) -> Self {
        let list_rv = data.list.len().to_string();
        let chunks: Vec<&[Arc<Pod>]> = data.list.chunks(PAGE).collect();
        let pages = chunks
            .iter()
            .enumerate()
            .map(|(n, items)| {
                let mut metadata = json!({ "resourceVersion": list_rv });
                if n + 1 < chunks.len() {
                    metadata["continue"] = json!((n + 1).to_string());
                }
                // The fields in kube-apiserver's order (a `json!` map would sort them).
                let page = PodList {
                    kind: "PodList",
                    api_version: "v1",
                    metadata,
                    items: items.iter().map(|p| &**p).collect(),
                };
                Bytes::from(serde_json::to_vec(&page).expect("a page encodes"))
            })
            .collect();
        let mut watch = Vec::new();
        let mut chunk = Vec::with_capacity(CHUNK + 8 * 1024);
        for (pod, _) in &data.events {
            // `type` first, as kube-apiserver writes it (a `json!` map would sort `object`
            // first, which makes serde buffer the object before it knows the variant).
            let event = Event {
                kind: "MODIFIED",
                object: pod,
            };
            serde_json::to_writer(&mut chunk, &event).expect("an event encodes");
            chunk.push(b'\n');
            if chunk.len() >= CHUNK {
                watch.push(Bytes::from(std::mem::take(&mut chunk)));
            }
        }
        if !chunk.is_empty() {
            watch.push(Bytes::from(chunk));
        }
        Self {
            pages,
            watch,
            protobuf: None,
        }
    }

    /// Adds the protobuf form of every response (the simulator's encoder, before any clock):
    /// the list pages as enveloped `PodList`s, the watch as length-prefixed frames.
    pub fn with_protobuf(mut self, data: &Data) -> Self {
        let pages = self
            .pages
            .iter()
            .map(|page| {
                let value: serde_json::Value = serde_json::from_slice(page).expect("a page");
                Bytes::from(informer_apiserver::encode_protobuf(&value).expect("a PodList"))
            })
            .collect();
        let mut watch = Vec::new();
        let mut chunk = Vec::with_capacity(CHUNK + 8 * 1024);
        for (pod, _) in &data.events {
            let object = serde_json::to_value(&**pod).expect("a pod");
            chunk.extend(
                informer_apiserver::protobuf_watch_frame("MODIFIED", &object).expect("a frame"),
            );
            if chunk.len() >= CHUNK {
                watch.push(Bytes::from(std::mem::take(&mut chunk)));
            }
        }
        if !chunk.is_empty() {
            watch.push(Bytes::from(chunk));
        }
        self.protobuf = Some((pages, watch));
        self
    }

    /// Bytes in the pages and in the watch stream.
    pub fn sizes(&self) -> (usize, usize) {
        (
            self.pages.iter().map(Bytes::len).sum(),
            self.watch.iter().map(Bytes::len).sum(),
        )
    }
}

#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct PodList<'a> {
    kind: &'static str,
    api_version: &'static str,
    metadata: serde_json::Value,
    items: Vec<&'a Pod>,
}

#[derive(serde::Serialize)]
struct Event<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    object: &'a Pod,
}

#[derive(serde::Deserialize)]
struct Params {
    watch: Option<String>,
    #[serde(rename = "continue")]
    continue_token: Option<String>,
}

#[derive(Clone)]
struct Served {
    encoded: Arc<Encoded>,
    stop: CancellationToken,
}

async fn pods(
    State(served): State<Served>,
    Query(params): Query<Params>,
    headers: http::HeaderMap,
) -> Response {
    let asks_protobuf = headers
        .get(http::header::ACCEPT)
        .and_then(|a| a.to_str().ok())
        .is_some_and(|a| a.contains(informer_protobuf::MEDIA_TYPE));
    let (content_type, pages, watch) = match &served.encoded.protobuf {
        Some((pages, watch)) if asks_protobuf => (informer_protobuf::MEDIA_TYPE, pages, watch),
        _ => (
            "application/json",
            &served.encoded.pages,
            &served.encoded.watch,
        ),
    };
    let json = [("content-type", content_type)];
    if params
        .watch
        .as_deref()
        .is_some_and(|w| w == "true" || w == "1")
    {
        let chunks = watch.clone();
        let stop = served.stop.clone();
        let events = futures::stream::iter(chunks.into_iter().map(Ok::<_, Infallible>));
        // Then open until the server stops: an ended watch would be re-established.
        let open = futures::stream::once(async move {
            stop.cancelled().await;
            Ok(Bytes::new())
        });
        return (json, Body::from_stream(events.chain(open))).into_response();
    }
    let page = params
        .continue_token
        .as_deref()
        .map_or(Some(0), |c| c.parse::<usize>().ok());
    match page.and_then(|n| pages.get(n)) {
        Some(bytes) => (json, Body::from(bytes.clone())).into_response(),
        None => (http::StatusCode::GONE, "unknown continue token").into_response(),
    }
}

/// The server on loopback; stops (ending every watch) when dropped or shut down.
#[derive(Debug)]
pub struct ReplayServer {
    url: String,
    stop: CancellationToken,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl ReplayServer {
    /// Serves `encoded` on a free loopback port. Call inside a tokio runtime.
    pub async fn start(encoded: Arc<Encoded>) -> Self {
        let stop = CancellationToken::new();
        let app = Router::new()
            .route("/api/v1/pods", axum::routing::get(pods))
            .with_state(Served {
                encoded,
                stop: stop.clone(),
            });
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        let task = tokio::spawn({
            let stop = stop.clone();
            async move {
                axum::serve(listener, app)
                    .with_graceful_shutdown(stop.cancelled_owned())
                    .await
                    .expect("serve");
            }
        });
        Self {
            url,
            stop,
            task: Some(task),
        }
    }

    /// Its base URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Ends every watch and stops serving.
    pub async fn shutdown(mut self) {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            task.await.expect("server task");
        }
    }
}

impl Drop for ReplayServer {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}
