//! MEM relist: the peak resident set while an informer relists 100,000 pods over HTTP, against
//! the resident set of the synced cache.
//!
//! A [`RelistServer`] in the measuring process serves `GET /api/v1/pods`:
//!
//! * a list: the pods of the current *epoch*, either in pages of [`PAGE`] with `continue`
//!   tokens ([`Listing::Paged`]) or as one response holding every pod ([`Listing::Whole`]: what
//!   kube-apiserver answers a list at `resourceVersion=0` from its watch cache, whatever the
//!   `limit`). Whatever the request's `limit` and `resourceVersion`. Every response is encoded
//!   as it is written, a page (or, for the whole list, [`PAGE`] pods) at a time, so the server
//!   holds no list of its own: the process's resident set is the client's;
//! * a watch: silent until [`RelistServer::expire`], then one `ERROR` event with a 410 `Expired`
//!   status, and the stream ends. A watch opened after the expiry stays silent until the server
//!   stops.
//!
//! `expire` also moves to the next epoch: the relist's pods carry new resource versions
//! ([`pod_resource_version`]), so a cache that holds them has relisted.
//!
//! A measurement ([`measure`]): start the informer (ours: [`w_inf::informer`] over a
//! [`KubeListerWatcher`]; kube-runtime: its `watcher` into a `reflector` store), wait until it
//! has synced and its watch is open, read `VmRSS`, reset the peak (`5` into
//! `/proc/self/clear_refs`), expire the watch, wait until the relist has reached the cache (two
//! lists served, every pod at its new version: for ours, every pod at the handler as an update;
//! for kube-runtime, a second `InitDone`), then read the peak (`VmHWM`).

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::StreamExt;
use informer_kube::KubeListerWatcher;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube_runtime::reflector::{self, ObjectRef, store};
use kube_runtime::watcher;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::mem::{HeapProbe, Sample, runtime};
use crate::w_inf;
use crate::workload::pod_at;

/// Pods per list page (client-go's and kube-runtime's default page size), and per chunk of the
/// whole list as it is written.
pub const PAGE: usize = 500;

/// The resource versions of epoch `e` start at `e × EPOCH`.
const EPOCH: u64 = 1_000_000;

/// How the server answers a list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listing {
    /// Pages of [`PAGE`] pods, with `continue` tokens.
    Paged,
    /// One response with every pod, whatever the `limit`.
    Whole,
    /// Pages, as [`Listing::Paged`], but the relist brings every pod at the version it had:
    /// a relist after a 410 on a collection where nothing changed.
    PagedUnchanged,
    /// One response, as [`Listing::Whole`], but the relist brings every pod at the version it
    /// had.
    WholeUnchanged,
}

impl Listing {
    /// The epoch whose resource versions the pods of `epoch` carry.
    fn versions_of(self, epoch: u64) -> u64 {
        match self {
            Self::PagedUnchanged | Self::WholeUnchanged => 0,
            Self::Paged | Self::Whole => epoch,
        }
    }
}

/// The resource version of pod `i` as listed in `epoch` (epoch 0: `i + 1`, as
/// [`crate::workload::pod`]).
pub fn pod_resource_version(i: usize, epoch: u64) -> u64 {
    epoch * EPOCH + i as u64 + 1
}

/// The list's resource version in `epoch`, for `pods` pods.
pub fn list_resource_version(pods: usize, epoch: u64) -> u64 {
    epoch * EPOCH + pods as u64
}

/// Pod `i` as listed in `epoch`: [`crate::workload::pod`] but for the resource version.
pub fn listed_pod(i: usize, epoch: u64) -> Pod {
    pod_at(i, pod_resource_version(i, epoch), i % 1000)
}

/// The `ERROR` event of an expired watch, as kube-apiserver writes it.
const EXPIRED: &[u8] = br#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 1 (2)","reason":"Expired","code":410}}
"#;

struct Shared {
    pods: usize,
    listing: Listing,
    epoch: tokio::sync::watch::Sender<u64>,
    lists: AtomicUsize,
    watches: AtomicUsize,
    stop: CancellationToken,
}

#[derive(serde::Deserialize)]
struct Params {
    watch: Option<String>,
    #[serde(rename = "continue")]
    continue_token: Option<String>,
}

/// The opening of a list, up to the first item.
fn list_head(pods: usize, epoch: u64, continue_token: Option<&str>) -> Vec<u8> {
    let rv = list_resource_version(pods, epoch);
    let more = continue_token.map_or_else(String::new, |c| format!(r#","continue":"{c}""#));
    format!(
        r#"{{"kind":"PodList","apiVersion":"v1","metadata":{{"resourceVersion":"{rv}"{more}}},"items":["#
    )
    .into_bytes()
}

/// Pods `range` of `epoch`, encoded and comma-separated; with a leading comma when `lead`.
fn items(range: std::ops::Range<usize>, epoch: u64, lead: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(range.len() * 512);
    let first = range.start;
    for i in range {
        if i > first || lead {
            out.push(b',');
        }
        serde_json::to_writer(&mut out, &listed_pod(i, epoch)).expect("a pod encodes");
    }
    out
}

async fn pods(State(s): State<Arc<Shared>>, Query(params): Query<Params>) -> Response {
    let json = [("content-type", "application/json")];
    if params
        .watch
        .as_deref()
        .is_some_and(|w| w == "true" || w == "1")
    {
        let mut epoch = s.epoch.subscribe();
        let opened = *epoch.borrow_and_update();
        s.watches.fetch_add(1, Ordering::AcqRel);
        let stop = s.stop.clone();
        let expired = async move {
            tokio::select! {
                () = async { drop(epoch.wait_for(|e| *e != opened).await) } => {
                    Some(Ok::<_, Infallible>(Bytes::from_static(EXPIRED)))
                }
                () = stop.cancelled() => None,
            }
        };
        let body = futures::stream::once(expired).filter_map(futures::future::ready);
        return (json, Body::from_stream(body)).into_response();
    }
    let (epoch, page) = match params.continue_token.as_deref() {
        None => {
            s.lists.fetch_add(1, Ordering::AcqRel);
            (*s.epoch.borrow(), 0)
        }
        Some(token) => match token
            .split_once('-')
            .and_then(|(e, p)| Some((e.parse::<u64>().ok()?, p.parse::<usize>().ok()?)))
        {
            Some(at) => at,
            None => return (http::StatusCode::GONE, "unknown continue token").into_response(),
        },
    };
    let n = s.pods;
    let versions = s.listing.versions_of(epoch);
    match s.listing {
        Listing::Paged | Listing::PagedUnchanged => {
            let start = page * PAGE;
            if start >= n && n > 0 {
                return (http::StatusCode::GONE, "unknown continue token").into_response();
            }
            let end = (start + PAGE).min(n);
            let token = (end < n).then(|| format!("{epoch}-{}", page + 1));
            let mut body = list_head(n, epoch, token.as_deref());
            body.extend(items(start..end, versions, false));
            body.extend_from_slice(b"]}");
            (json, Body::from(body)).into_response()
        }
        Listing::Whole | Listing::WholeUnchanged => {
            let head = futures::stream::once(async move { list_head(n, epoch, None) });
            let chunks = futures::stream::iter((0..n).step_by(PAGE))
                .map(move |start| items(start..(start + PAGE).min(n), versions, start > 0));
            let tail = futures::stream::once(async { b"]}".to_vec() });
            let body = head
                .chain(chunks)
                .chain(tail)
                .map(|b| Ok::<_, Infallible>(Bytes::from(b)));
            (json, Body::from_stream(body)).into_response()
        }
    }
}

/// The server on loopback; stops (ending every watch) when dropped or shut down.
pub struct RelistServer {
    url: String,
    shared: Arc<Shared>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl std::fmt::Debug for RelistServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RelistServer")
            .field("url", &self.url)
            .field("pods", &self.shared.pods)
            .field("listing", &self.shared.listing)
            .field("epoch", &self.epoch())
            .finish()
    }
}

impl RelistServer {
    /// Serves `pods` pods as `listing` on a free loopback port. Call inside a tokio runtime.
    pub async fn start(pods: usize, listing: Listing) -> Self {
        let shared = Arc::new(Shared {
            pods,
            listing,
            epoch: tokio::sync::watch::Sender::new(0),
            lists: AtomicUsize::new(0),
            watches: AtomicUsize::new(0),
            stop: CancellationToken::new(),
        });
        let app = Router::new()
            .route("/api/v1/pods", axum::routing::get(pods_handler))
            .with_state(Arc::clone(&shared));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        let task = tokio::spawn({
            let stop = shared.stop.clone();
            async move {
                axum::serve(listener, app)
                    .with_graceful_shutdown(stop.cancelled_owned())
                    .await
                    .expect("serve");
            }
        });
        Self {
            url,
            shared,
            task: Some(task),
        }
    }

    /// Its base URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Lists begun (first pages) so far.
    pub fn lists(&self) -> usize {
        self.shared.lists.load(Ordering::Acquire)
    }

    /// Watches opened so far.
    pub fn watches(&self) -> usize {
        self.shared.watches.load(Ordering::Acquire)
    }

    /// The current epoch: 0, then one more at each [`expire`](Self::expire).
    pub fn epoch(&self) -> u64 {
        *self.shared.epoch.borrow()
    }

    /// Every open watch answers a 410 `Expired` `ERROR` event and ends; lists begun from now
    /// on serve the next epoch's pods.
    pub fn expire(&self) {
        self.shared.epoch.send_modify(|e| *e += 1);
    }

    /// Ends every watch and stops serving.
    pub async fn shutdown(mut self) {
        self.shared.stop.cancel();
        if let Some(task) = self.task.take() {
            task.await.expect("server task");
        }
    }
}

impl Drop for RelistServer {
    fn drop(&mut self) {
        self.shared.stop.cancel();
    }
}

async fn pods_handler(state: State<Arc<Shared>>, query: Query<Params>) -> Response {
    pods(state, query).await
}

/// A kube client for the server at `url`, without retries.
pub fn client(url: &str) -> kube::Client {
    let mut config = kube::Config::new(url.parse().expect("server URL"));
    config.default_retry = false;
    kube::Client::try_from(config).expect("client config")
}

/// Who lists and caches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The runtime, the server and a client, nothing listed.
    Baseline,
    /// Our informer over [`KubeListerWatcher`] (its default queue, the atomic in-order FIFO: a
    /// relist applied to the cache in one step; two indexes, one handler).
    Ours,
    /// As [`Side::Ours`], with each page of the relist applied as it arrives
    /// (`with_relist_by_page`).
    OursByPage,
    /// kube-runtime's `watcher` (kube-client's list and watch) into a `reflector` store.
    KubeRuntime,
    /// As [`Side::OursByPage`], on a compact cache (`informer_kube::compact_cache`, 100 kept
    /// decoded).
    OursCompact,
}

/// The resident set of this process (`VmRSS`), bytes.
pub fn rss_now() -> Option<u64> {
    proc_status_kb("VmRSS:")
}

fn proc_status_kb(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Resets the peak resident set (`VmHWM`) to the current one; whether it took (the peak is then
/// no more than the resident set read after it).
pub fn reset_peak() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
        && match (crate::mem::rss_peak(), rss_now()) {
            (Some(peak), Some(rss)) => peak <= rss + 4 * 1024 * 1024,
            _ => false,
        }
}

/// Waits until `done`, checking every millisecond.
async fn until(mut done: impl FnMut() -> bool) {
    while !done() {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// One relist measurement over `n` pods served as `listing`, by `side`, in this process.
/// `heap` reads the live heap at synced and once relisted.
pub fn measure(side: Side, listing: Listing, n: usize, heap: HeapProbe) -> Sample {
    let rt = runtime();
    let server = rt.block_on(RelistServer::start(n, listing));
    let client = rt.block_on(async { client(server.url()) });
    let mut sample = match side {
        Side::Baseline => {
            drop(client);
            Sample {
                rss_synced: rss_now(),
                rss_peak: crate::mem::rss_peak(),
                heap_synced: heap().map(|h| h.bytes as u64),
                ..Sample::default()
            }
        }
        Side::Ours => ours(&rt, &server, client, n, heap, false, false),
        Side::OursByPage => ours(&rt, &server, client, n, heap, true, false),
        Side::OursCompact => ours(&rt, &server, client, n, heap, true, true),
        Side::KubeRuntime => kube_runtime(&rt, &server, client, n, heap),
    };
    sample.pods = n;
    rt.block_on(server.shutdown());
    sample
}

/// The half of a measurement between synced and relisted: reads `VmRSS`, resets the peak,
/// expires the watch, waits for `relisted`, reads the peak.
fn relist(
    rt: &tokio::runtime::Runtime,
    server: &RelistServer,
    heap: HeapProbe,
    relisted: impl FnMut() -> bool,
) -> Sample {
    // The watch is open (it is what the expiry ends).
    rt.block_on(until(|| server.watches() >= 1));
    assert_eq!(server.lists(), 1, "one list before the relist");
    let rss_synced = rss_now();
    let heap_synced = heap().map(|h| h.bytes as u64);
    let peak_reset = reset_peak();
    let started = Instant::now();
    server.expire();
    rt.block_on(until(relisted));
    let relist_secs = started.elapsed().as_secs_f64();
    let rss_relist_peak = crate::mem::rss_peak();
    assert_eq!(server.lists(), 2, "exactly one relist");
    Sample {
        rss_synced,
        rss_relist_peak,
        rss_after_relist: rss_now(),
        heap_synced,
        heap_after_relist: heap().map(|h| h.bytes as u64),
        peak_reset: Some(peak_reset),
        relist_secs: Some(relist_secs),
        lists: Some(server.lists() as u64),
        ..Sample::default()
    }
}

fn key(i: usize) -> String {
    format!("ns-{}/pod-{i}", i % 100)
}

fn at_version(p: &Pod, i: usize, epoch: u64) -> bool {
    p.metadata.resource_version.as_deref() == Some(&pod_resource_version(i, epoch).to_string())
}

fn ours(
    rt: &tokio::runtime::Runtime,
    server: &RelistServer,
    client: kube::Client,
    n: usize,
    heap: HeapProbe,
    by_page: bool,
    compact: bool,
) -> Sample {
    let cache = compact.then(|| informer_kube::compact_cache::<Pod>(crate::mem::COMPACT_HOT));
    let (informer, counters) = rt.block_on(async {
        let source = KubeListerWatcher::new(Api::<Pod>::all(client)).json_only();
        // The relist this measures is a list (paged or whole), not a streaming list.
        w_inf::informer_in(source, 1, cache, |b| {
            b.relist_by_page(by_page).streaming_list(false)
        })
    });
    let counter = &counters[0];
    let (stop, task) = crate::mem::run_until_synced(rt, &informer, counter, n);
    let lister = informer.lister();
    let last = key(n - 1);
    assert!(at_version(
        &lister.get(&last).expect("the last pod"),
        n - 1,
        0
    ));
    let relisted = server.shared.listing.versions_of(1);
    let sample = relist(rt, server, heap, || {
        counter.saw(n, n)
            && informer.has_synced()
            && lister
                .get(&last)
                .is_some_and(|p| at_version(&p, n - 1, relisted))
    });
    // Every pod in the cache is the relisted one.
    let cached = lister.list(&informer_store::Everything);
    assert_eq!(cached.len(), n);
    for i in 0..n {
        assert!(at_version(
            &lister.get(&key(i)).expect("a pod"),
            i,
            relisted
        ));
    }
    drop(cached);
    crate::mem::stop_and_join(rt, &stop, task);
    sample
}

fn kube_runtime(
    rt: &tokio::runtime::Runtime,
    server: &RelistServer,
    client: kube::Client,
    n: usize,
    heap: HeapProbe,
) -> Sample {
    let (reader, writer) = store::store::<Pod>();
    let inits_done = Arc::new(AtomicUsize::new(0));
    let driver = rt.spawn({
        let inits_done = Arc::clone(&inits_done);
        async move {
            let stream = watcher::watcher(Api::<Pod>::all(client), watcher::Config::default());
            reflector::reflector(writer, stream)
                .for_each(|event| {
                    if matches!(event, Ok(watcher::Event::InitDone)) {
                        inits_done.fetch_add(1, Ordering::AcqRel);
                    }
                    futures::future::ready(())
                })
                .await;
        }
    });
    let pod_ref =
        |i: usize| ObjectRef::<Pod>::new(&format!("pod-{i}")).within(&format!("ns-{}", i % 100));
    let last = pod_ref(n - 1);
    rt.block_on(until(|| {
        inits_done.load(Ordering::Acquire) >= 1 && reader.len() == n
    }));
    assert!(at_version(
        &reader.get(&last).expect("the last pod"),
        n - 1,
        0
    ));
    let relisted = server.shared.listing.versions_of(1);
    let sample = relist(rt, server, heap, || {
        inits_done.load(Ordering::Acquire) >= 2
            && reader
                .get(&last)
                .is_some_and(|p| at_version(&p, n - 1, relisted))
    });
    assert_eq!(reader.len(), n);
    for i in 0..n {
        assert!(at_version(
            &reader.get(&pod_ref(i)).expect("a pod"),
            i,
            relisted
        ));
    }
    driver.abort();
    drop(rt.block_on(driver));
    sample
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list_all(url: &str) -> (Vec<Pod>, usize) {
        let rt = runtime();
        rt.block_on(async {
            let api = Api::<Pod>::all(client(url));
            let mut pods = Vec::new();
            let mut lp = kube::api::ListParams::default().limit(PAGE as u32);
            let mut responses = 0;
            loop {
                let page = api.list(&lp).await.expect("a list");
                responses += 1;
                pods.extend(page.items);
                match page.metadata.continue_.filter(|c| !c.is_empty()) {
                    Some(c) => lp = lp.continue_token(&c),
                    None => break,
                }
            }
            (pods, responses)
        })
    }

    #[test]
    fn serves_every_pod_paged_or_whole_and_the_next_epoch_after_expiry() {
        let rt = runtime();
        for (listing, responses) in [(Listing::Paged, 3), (Listing::Whole, 1)] {
            let server = rt.block_on(RelistServer::start(1_200, listing));
            let url = server.url().to_owned();
            let (pods, got) = std::thread::spawn(move || list_all(&url))
                .join()
                .expect("lister");
            assert_eq!(got, responses);
            assert_eq!(pods.len(), 1_200);
            assert!(pods.iter().enumerate().all(|(i, p)| *p == listed_pod(i, 0)));
            server.expire();
            let url = server.url().to_owned();
            let (pods, _) = std::thread::spawn(move || list_all(&url))
                .join()
                .expect("lister");
            assert!(pods.iter().enumerate().all(|(i, p)| *p == listed_pod(i, 1)));
            assert_eq!(server.lists(), 2);
            rt.block_on(server.shutdown());
        }
    }

    #[test]
    fn a_watch_stays_silent_until_expired_then_answers_410() {
        let rt = runtime();
        rt.block_on(async {
            let server = RelistServer::start(10, Listing::Paged).await;
            let api = Api::<Pod>::all(client(server.url()));
            let stream = api
                .watch(&kube::api::WatchParams::default(), "10")
                .await
                .expect("a watch");
            let mut stream = std::pin::pin!(stream);
            until(|| server.watches() == 1).await;
            // Silent while not expired.
            let first = tokio::time::timeout(Duration::from_millis(50), stream.next()).await;
            assert!(first.is_err(), "an event before the expiry: {first:?}");
            server.expire();
            match stream.next().await {
                Some(Ok(kube::api::WatchEvent::Error(status))) => {
                    assert_eq!(status.code, 410);
                    assert_eq!(status.reason, "Expired");
                }
                other => panic!("expected a 410 ERROR event, got {other:?}"),
            }
            assert!(
                stream.next().await.is_none(),
                "the watch ends after the error"
            );
            server.shutdown().await;
        });
    }

    #[test]
    fn ours_and_kube_runtime_relist_a_few_pods() {
        for listing in [Listing::Paged, Listing::Whole] {
            for side in [
                Side::Ours,
                Side::OursByPage,
                Side::KubeRuntime,
                Side::OursCompact,
            ] {
                let s = measure(side, listing, 1_100, || None);
                assert_eq!(s.lists, Some(2), "{side:?} {listing:?}");
                assert!(s.rss_synced.is_some() && s.rss_relist_peak.is_some());
            }
        }
    }
}
