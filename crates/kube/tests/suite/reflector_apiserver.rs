//! The whole reflector path — Reflector → KubeListerWatcher → kube-client → HTTP — against the
//! in-process API server, through every fault of the protocol's catalogue that the server can
//! inject. After each fault the store converges to the server's state, relists happen only where
//! the rules say, and while the server fails the request rate stays bounded.
//!
//! Real time and real sockets: watches are short (1–2 s), bookmarks every 100 ms, backoff small;
//! every wait is on a condition with a generous bound.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use informer_apiserver::{
    ApiServer, Config, ExpiredWatch, Failure, RemainingItemCount, SlowStream, StatusError, Verb,
};
use informer_kube::{KubeListerWatcher, key_func};
use informer_reflector::{
    BackoffConfig, Error, ListPage, ListParams, ListerWatcher, Reflector, WatchParams, WatchStream,
};
use informer_store::{KnownObjects, Store, ThreadSafeStore};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use parking_lot::Mutex;
use serde_json::json;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

thread_local! {
    /// The scenario runs with JSON only (set by its test; the default asks for protobuf).
    static JSON: Cell<bool> = const { Cell::new(false) };
}

/// Generous bound for convergence.
const WAIT: Duration = Duration::from_secs(20);

/// A request the reflector made: `list` (a first page), `page` (a continuation) or `watch`, with
/// its resource version and when it was made.
#[derive(Debug, Clone)]
struct Call {
    kind: &'static str,
    rv: String,
}

/// Wraps a `ListerWatcher` and records every call.
struct Recording<L> {
    inner: L,
    calls: Arc<Mutex<Vec<Call>>>,
}

impl<L: ListerWatcher<Pod>> ListerWatcher<Pod> for Recording<L> {
    fn list(
        &self,
        params: &ListParams,
    ) -> impl Future<Output = Result<ListPage<Pod>, Error>> + Send {
        let kind = if params.continue_token.is_some() {
            "page"
        } else {
            "list"
        };
        self.calls.lock().push(Call {
            kind,
            rv: params.resource_version.clone(),
        });
        self.inner.list(params)
    }

    fn watch(
        &self,
        params: &WatchParams,
    ) -> impl Future<Output = Result<WatchStream<Pod>, Error>> + Send {
        self.calls.lock().push(Call {
            kind: "watch",
            rv: params.resource_version.clone(),
        });
        self.inner.watch(params)
    }
    fn supports_streaming_list(&self) -> bool {
        self.inner.supports_streaming_list()
    }
}

type TestReflector = Reflector<Pod, Recording<KubeListerWatcher<Pod>>, Arc<ThreadSafeStore<Pod>>>;

struct Env {
    server: ApiServer,
    /// A clone of the reflector's lister-watcher: its encoding counts.
    encodings: KubeListerWatcher<Pod>,
    json: bool,
    /// Only pods with this `app` label are watched (the reflector's label selector).
    app: Option<String>,
    store: Arc<ThreadSafeStore<Pod>>,
    reflector: Arc<TestReflector>,
    calls: Arc<Mutex<Vec<Call>>>,
    errors: Arc<Mutex<Vec<String>>>,
    stop: CancellationToken,
    task: JoinHandle<()>,
}

/// The revision a resource version of the server names: decimal, or with
/// `Config::opaque_resource_versions`, `x` and hex. Only the test reads them as revisions, to
/// know when the reflector has caught up; the reflector itself never does.
fn revision(rv: &str) -> Option<u64> {
    match rv.strip_prefix('x') {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => rv.parse().ok(),
    }
}

fn small_backoff() -> BackoffConfig {
    BackoffConfig {
        initial: Duration::from_millis(20),
        factor: 2.0,
        cap: Duration::from_millis(200),
        jitter: 0.5,
        reset_after: Duration::from_secs(2),
    }
}

fn pod(name: &str, generation: u32) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "demo", "labels": {"app": "web", "gen": generation.to_string()}},
        "spec": {"containers": [{"name": "c", "image": "nginx"}]},
    }))
    .unwrap()
}

/// A server seeded by `seed`, and a reflector configured by `configure` — watching only pods
/// labelled `app=<app>` when `app` is given.
async fn start(
    config: Config,
    seed: impl FnOnce(&ApiServer),
    app: Option<&str>,
    configure: impl FnOnce(TestReflector) -> TestReflector,
) -> Env {
    let server = ApiServer::start(config).await.expect("server starts");
    seed(&server);
    let mut kube_config = kube::Config::new(server.url().parse().unwrap());
    // The reflector decides retries; kube-client's own retry layer would hide the faults.
    kube_config.default_retry = false;
    let client = kube::Client::try_from(kube_config).unwrap();
    let calls = Arc::new(Mutex::new(Vec::new()));
    let inner = KubeListerWatcher::new(Api::<Pod>::all(client));
    let json = JSON.with(Cell::get);
    let inner = if json { inner.json_only() } else { inner };
    let encodings = inner.clone();
    let lister_watcher = Recording {
        inner,
        calls: calls.clone(),
    };
    let store = Arc::new(ThreadSafeStore::new(key_func::<Pod>()));
    let errors = Arc::new(Mutex::new(Vec::new()));
    let seen = errors.clone();
    let reflector = Reflector::new(lister_watcher, store.clone())
        .with_backoff(small_backoff())
        .with_min_watch_timeout(Duration::from_secs(1))
        .with_seed(11)
        .with_watch_error_handler(move |e: &Error| {
            seen.lock().push(format!("{:?}: {e}", e.kind()));
        });
    let reflector = match app {
        Some(app) => reflector.with_label_selector(format!("app={app}")),
        None => reflector,
    };
    let reflector = Arc::new(configure(reflector));
    let stop = CancellationToken::new();
    let task = tokio::spawn({
        let (reflector, stop) = (reflector.clone(), stop.clone());
        async move { reflector.run(stop).await }
    });
    let env = Env {
        server,
        encodings,
        json,
        app: app.map(str::to_owned),
        store,
        reflector,
        calls,
        errors,
        stop,
        task,
    };
    env.converged("the first sync").await;
    env
}

async fn start_default() -> Env {
    start(
        Config::for_tests(Duration::from_millis(100)),
        |server| {
            for i in 0..5 {
                server.create(&pod(&format!("p{i}"), 0)).unwrap();
            }
        },
        None,
        |r| r,
    )
    .await
}

impl Env {
    /// key → resourceVersion of the store.
    fn cached(&self) -> BTreeMap<String, String> {
        self.store
            .list_keys()
            .into_iter()
            .map(|k| {
                let rv = self
                    .store
                    .get_by_key(&k)
                    .unwrap()
                    .metadata
                    .resource_version
                    .clone();
                (k, rv.unwrap_or_default())
            })
            .collect()
    }

    /// key → resourceVersion of the server.
    fn truth(&self) -> BTreeMap<String, String> {
        let (pods, _) = self.server.list::<Pod>(None).unwrap();
        pods.into_iter()
            .filter(|p| match &self.app {
                Some(app) => p.metadata.labels.as_ref().and_then(|l| l.get("app")) == Some(app),
                None => true,
            })
            .map(|p| {
                let key = key_func::<Pod>()(&p).unwrap();
                (key, p.metadata.resource_version.unwrap_or_default())
            })
            .collect()
    }

    /// Waits until the store equals the server's state and the reflector's resume version is
    /// at least the last change's.
    async fn converged(&self, what: &str) {
        let deadline = Instant::now() + WAIT;
        loop {
            let truth = self.truth();
            let last = revision(&self.reflector.last_sync_resource_version()).unwrap_or(0);
            let newest = truth
                .values()
                .filter_map(|rv| revision(rv))
                .max()
                .unwrap_or(0);
            if self.cached() == truth && last >= newest {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: never converged\nstore:  {:?}\nserver: {truth:?}\ncalls: {:?}\nerrors: {:?}",
                self.cached(),
                self.shapes(),
                self.errors.lock()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn lists(&self) -> usize {
        self.calls
            .lock()
            .iter()
            .filter(|c| c.kind == "list")
            .count()
    }

    fn watches(&self) -> usize {
        self.calls
            .lock()
            .iter()
            .filter(|c| c.kind == "watch")
            .count()
    }

    fn shapes(&self) -> Vec<String> {
        self.calls
            .lock()
            .iter()
            .map(|c| format!("{}@{}", c.kind, c.rv))
            .collect()
    }

    /// Waits (at most [`WAIT`]) until `cond` holds.
    async fn wait_for(&self, what: &str, cond: impl Fn(&Self) -> bool) {
        let deadline = Instant::now() + WAIT;
        while !cond(self) {
            assert!(Instant::now() < deadline, "{what}: {:?}", self.shapes());
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Waits until the reflector has made `n` watch requests in all.
    async fn watches_reach(&self, n: usize) {
        self.wait_for(&format!("{n} watches"), |e| e.watches() >= n)
            .await;
    }

    /// Waits until the reflector has made `n` first-page list requests in all.
    async fn lists_reach(&self, n: usize) {
        self.wait_for(&format!("{n} lists"), |e| e.lists() >= n)
            .await;
    }

    /// Waits until at least one watch is open on the server.
    async fn watching(&self) {
        self.wait_for("an open watch", |e| e.server.open_watches() > 0)
            .await;
    }

    /// Three changes: a create, an update and a delete (each skipped if it does not apply).
    fn churn(&self, round: u32) {
        let _ = self.server.create(&pod(&format!("new-{round}"), round));
        let _ = self.server.patch::<Pod>(
            Some("demo"),
            "p1",
            &json!({"metadata": {"labels": {"gen": round.to_string()}}}),
        );
        let _ = self
            .server
            .delete::<Pod>(Some("demo"), &format!("p{}", 2 + round % 3));
    }

    /// Waits until a watch is open and has delivered something (a bookmark comes every 100 ms),
    /// so that ending it is not a very short watch.
    async fn watching_for_a_while(&self) {
        self.watching().await;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    async fn stop(self) {
        // Every response was read in the scenario's encoding.
        let counts = self.encodings.encoding_counts();
        if self.json {
            assert_eq!(counts.protobuf, 0, "{counts:?}");
        } else {
            assert!(counts.protobuf > 0 && counts.json == 0, "{counts:?}");
        }
        self.stop.cancel();
        tokio::time::timeout(Duration::from_secs(5), self.task)
            .await
            .expect("the reflector stops promptly")
            .unwrap();
        self.server.shutdown().await;
    }
}

async fn lists_then_watches_and_follows_changes_without_relisting() {
    let env = start_default().await;
    assert_eq!(env.shapes()[0], "list@0");
    for round in 0..5 {
        env.churn(round);
        env.converged("after churn").await;
    }
    // Let several 1–2 s watches time out and resume.
    let watches = env.watches();
    env.watches_reach(watches + 2).await;
    env.churn(9);
    env.converged("after watch timeouts").await;
    assert_eq!(env.lists(), 1, "{:?}", env.shapes());
    assert!(env.errors.lock().is_empty(), "{:?}", env.errors.lock());
    env.stop().await;
}

async fn a_dropped_connection_resumes_without_a_relist() {
    let env = start_default().await;
    for round in 0..3 {
        env.watching_for_a_while().await;
        env.server.faults().drop_watches();
        env.churn(round);
        env.converged("after a dropped watch").await;
    }
    assert_eq!(env.lists(), 1, "{:?}", env.shapes());
    env.stop().await;
}

async fn a_connection_dropped_inside_an_event_resumes_from_the_last_complete_event() {
    let env = start_default().await;
    for round in 0..3 {
        env.watching_for_a_while().await;
        env.churn(round);
        env.converged("before the drop").await;
        let rv = env.reflector.last_sync_resource_version();
        let watches = env.watches();
        env.server.faults().drop_watches_mid_event();
        env.watches_reach(watches + 1).await;
        env.churn(round + 10);
        env.converged("after a drop inside an event").await;
        assert!(
            env.shapes()[watches..]
                .iter()
                .any(|s| *s == format!("watch@{rv}")),
            "resumed from {rv}: {:?}",
            env.shapes()
        );
    }
    assert_eq!(env.lists(), 1, "{:?}", env.shapes());
    env.stop().await;
}

async fn a_lagging_watch_cache_leads_to_a_consistent_relist() {
    let env = start_default().await;
    env.watching_for_a_while().await;
    // The cache falls behind: a relist "not older than" the reflector's version waits for it,
    // then fails with 504 TooLarge, and the reflector lists the latest state at "".
    env.server.faults().set_cache_lag(1_000);
    env.churn(0);
    env.converged("before the relist").await;
    let last = env.reflector.last_sync_resource_version();
    env.server
        .faults()
        .inject_watch_error(StatusError::expired("too old resource version"));
    env.lists_reach(3).await;
    env.watches_reach(env.watches() + 1).await;
    env.churn(1);
    env.converged("after the consistent relist").await;
    let shapes = env.shapes();
    let relists: Vec<_> = shapes.iter().filter(|s| s.starts_with("list@")).collect();
    let want = [
        "list@0".to_owned(),
        format!("list@{last}"),
        "list@".to_owned(),
    ];
    assert_eq!(relists, want.iter().collect::<Vec<_>>(), "{shapes:?}");
    env.stop().await;
}

async fn a_watch_dropped_at_once_without_events_is_a_very_short_watch_and_relists() {
    let env = start(
        // No bookmarks: a fresh watch delivers nothing until a change.
        Config::for_tests(Duration::from_secs(3600)),
        |s| {
            s.create(&pod("p0", 0)).unwrap();
        },
        None,
        |r| r,
    )
    .await;
    env.watching().await;
    env.server.faults().drop_watches();
    env.lists_reach(2).await;
    env.churn(0);
    env.converged("after the relist").await;
    assert!(
        env.errors
            .lock()
            .iter()
            .any(|e| e.contains("very short watch")),
        "{:?}",
        env.errors.lock()
    );
    env.stop().await;
}

async fn a_torn_event_is_discarded_and_the_watch_resumes_without_a_relist() {
    let env = start_default().await;
    env.watching().await;
    env.churn(0);
    env.converged("before").await;
    let rv = env.reflector.last_sync_resource_version();
    env.server.faults().torn_event();
    env.churn(1);
    env.converged("after a torn event").await;
    assert_eq!(env.lists(), 1, "{:?}", env.shapes());
    assert!(
        env.shapes().contains(&format!("watch@{rv}")),
        "resumed from {rv}: {:?}",
        env.shapes()
    );
    env.stop().await;
}

async fn a_garbage_line_is_a_decode_error_then_a_relist_or_a_rewatch_inside_the_retry_window() {
    // By default (client-go's default too), an undecodable event ends the watch and relists.
    let env = start_default().await;
    env.watching().await;
    env.server.faults().garbage_line();
    env.churn(0);
    env.converged("after a garbage line").await;
    assert_eq!(env.lists(), 2, "{:?} {:?}", env.shapes(), env.errors.lock());
    assert!(
        env.errors
            .lock()
            .iter()
            .any(|e| e.starts_with("InternalError")),
        "{:?}",
        env.errors.lock()
    );
    env.stop().await;

    // With an internal-error retry window, it re-watches instead.
    let env = start(
        Config::for_tests(Duration::from_millis(100)),
        |s| {
            s.create(&pod("p0", 0)).unwrap();
        },
        None,
        |r| r.with_max_internal_error_retry(Duration::from_secs(30)),
    )
    .await;
    env.watching().await;
    env.server.faults().garbage_line();
    env.churn(0);
    env.converged("after a garbage line, with a retry window")
        .await;
    assert_eq!(env.lists(), 1, "{:?}", env.shapes());
    env.stop().await;
}

/// Makes the reflector miss changes: its next watch is refused with 429 (Retry-After 1 s), the
/// open one is closed, and while it waits the history is changed and compacted. Its re-watch from
/// the old version is then too old.
async fn miss_changes_then_compact(env: &Env) {
    env.watching_for_a_while().await;
    let watches = env.watches();
    env.server
        .faults()
        .fail_next(Verb::Watch, 1, Failure::too_many_requests(1));
    env.server.faults().close_watches();
    env.watches_reach(watches + 1).await;
    env.churn(7);
    env.server.delete::<Pod>(Some("demo"), "p0").unwrap();
    env.server.faults().compact_all();
}

async fn a_410_on_watch_start_relists_in_every_flavour() {
    for mode in [
        ExpiredWatch::ErrorEvent,
        ExpiredWatch::ErrorEventGone,
        ExpiredWatch::Http410,
    ] {
        let env = start_default().await;
        env.server.faults().set_expired_watch(mode);
        let last = env.reflector.last_sync_resource_version();
        miss_changes_then_compact(&env).await;
        env.converged("after a 410").await;
        assert!(
            !env.cached().contains_key("demo/p0"),
            "the missed deletion is applied"
        );
        let shapes = env.shapes();
        assert_eq!(env.lists(), 2, "{mode:?}: {shapes:?}");
        // Relist at the last version (not-older-than), not at "".
        assert!(
            shapes.contains(&format!("list@{last}")),
            "{mode:?}: {shapes:?}"
        );
        assert!(
            env.errors.lock().iter().any(|e| e.starts_with("Expired")),
            "{:?}",
            env.errors.lock()
        );
        env.stop().await;
    }
}

async fn error_events_mid_stream_follow_the_rules() {
    // (status, relists it should cause)
    let cases = [
        (StatusError::expired("too old resource version: 1 (5)"), 1),
        (StatusError::internal("etcd is sad"), 1),
        (StatusError::too_large_resource_version("999", "5"), 1),
        (StatusError::too_many_requests("slow down", 1), 0),
    ];
    for (status, relists) in cases {
        let env = start_default().await;
        env.watching().await;
        let code = status.code();
        env.server.faults().inject_watch_error(status);
        env.churn(0);
        env.converged("after an ERROR event").await;
        assert_eq!(env.lists(), 1 + relists, "{code}: {:?}", env.shapes());
        if code == 504 {
            // A too-large version: the relist is a consistent read.
            assert!(
                env.shapes().iter().any(|s| s == "list@"),
                "{:?}",
                env.shapes()
            );
        }
        env.stop().await;
    }

    // An ERROR whose object is not a Status: an unknown error, relist after backoff.
    let env = start_default().await;
    env.watching().await;
    env.server.faults().inject_watch_error_object(json!({}));
    env.churn(0);
    env.converged("after a non-Status ERROR").await;
    assert_eq!(env.lists(), 2, "{:?}", env.shapes());
    env.stop().await;
}

async fn duplicate_events_leave_the_store_right() {
    let env = start_default().await;
    env.watching().await;
    env.churn(0);
    env.converged("before").await;
    for _ in 0..3 {
        env.server.faults().duplicate_last_event();
    }
    env.churn(1);
    env.converged("after duplicates").await;
    assert_eq!(env.lists(), 1, "{:?}", env.shapes());
    env.stop().await;
}

async fn restarts_and_resets_converge() {
    // A restart: watches aborted, history lost.
    let env = start_default().await;
    env.watching().await;
    env.server.faults().restart();
    env.churn(0);
    env.converged("after a restart").await;
    env.stop().await;

    // A cache re-initialisation: watches closed cleanly, history lost.
    let env = start_default().await;
    env.watching().await;
    env.server.faults().reinitialize_cache();
    env.churn(0);
    env.converged("after a cache re-initialisation").await;
    env.stop().await;

    // An etcd restore done right: the revision jumps and everything before it is compacted.
    let env = start_default().await;
    env.watching().await;
    let before = env.server.resource_version();
    env.server.faults().bump_revision(1_000_000);
    env.churn(0);
    env.converged("after a revision bump").await;
    let last: u64 = env.reflector.last_sync_resource_version().parse().unwrap();
    assert!(last > before + 1_000_000);
    env.stop().await;
}

async fn a_backward_reset_recovers_through_the_too_large_path_once_a_relist_happens() {
    // An etcd restore without a revision bump: the head moves back below the reflector's
    // version. Like client-go's, the reflector's re-watch from that "future" version waits
    // silently (the known hazard of such a restore); once anything makes it relist, the list
    // not older than its version fails with 504 TooLarge and it lists the latest state at "".
    let env = start_default().await;
    let rewind_to = env.server.resource_version();
    env.churn(0);
    env.converged("before the restore").await;
    env.watching_for_a_while().await;
    assert!(env.server.faults().rewind_to(rewind_to));
    env.server.create(&pod("after-restore", 1)).unwrap();
    // The waiting watch times out (1–2 s) and the next watch request is refused: a relist.
    env.server.faults().fail_next(
        Verb::Watch,
        1,
        Failure::Status(StatusError::custom(403, "Forbidden", "denied")),
    );
    env.converged("after the restore").await;
    assert!(
        env.shapes().iter().any(|s| s == "list@"),
        "{:?}",
        env.shapes()
    );
    assert!(env.cached().contains_key("demo/after-restore"));
    env.stop().await;
}

async fn a_failing_server_sees_a_bounded_request_rate_then_converges() {
    let env = start_default().await;
    env.watching().await;
    // The server restarts and its storage initialises for 3 s: every list and watch gets 429
    // with Retry-After 1 s.
    env.server.faults().set_unavailable(Some(1));
    env.server.faults().restart();
    let before = env.calls.lock().len();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let during = env.calls.lock().len() - before;
    env.server.faults().set_unavailable(None);
    env.churn(0);
    env.converged("after the outage").await;
    // Watches wait Retry-After (1 s); failed lists back off (20 ms doubling to 200 ms, +50 %).
    // Without backoff a hot loop would make thousands of requests.
    assert!(during <= 30, "{during} requests in 3 s: {:?}", env.shapes());
    assert!(during >= 2, "it kept trying: {during}");

    // Plain-text 429s from priority and fairness on the list: backoff, then recovery.
    env.server
        .faults()
        .fail_next(Verb::List, 3, Failure::throttled(1));
    env.server
        .faults()
        .fail_next(Verb::Watch, 1, Failure::internal("boom"));
    env.server.faults().close_watches();
    env.churn(1);
    env.converged("after throttled lists").await;
    env.stop().await;
}

async fn a_slow_stream_is_not_mistaken_for_a_failure() {
    let env = start_default().await;
    env.server.faults().set_slow_stream(Some(SlowStream {
        chunk_bytes: 7,
        delay: Duration::from_millis(1),
    }));
    env.watching().await;
    env.churn(0);
    env.converged("through a slow stream").await;
    env.server.faults().set_slow_stream(None);
    assert_eq!(env.lists(), 1, "{:?}", env.shapes());
    env.stop().await;
}

async fn bookmarks_keep_a_selective_watch_resumable_past_compaction() {
    // The reflector watches only app=quiet pods; other pods change, the history is compacted
    // past the last quiet change, and the watch resumes from its bookmark version without a 410.
    let run = |bookmarks: bool| async move {
        let env = start(
            Config::for_tests(Duration::from_millis(100)),
            |s| {
                let mut quiet = pod("quiet", 0);
                quiet.metadata.labels = Some([("app".to_owned(), "quiet".to_owned())].into());
                s.create(&quiet).unwrap();
            },
            Some("quiet"),
            |r| r,
        )
        .await;
        env.server.faults().set_bookmarks(bookmarks);
        env.watching().await;
        for round in 0..3 {
            env.churn(round);
        }
        if bookmarks {
            // A bookmark (every 100 ms) carries the watch's resume version up to the head.
            let head = env.server.resource_version().to_string();
            env.wait_for("a bookmark at the head", |e| {
                e.reflector.last_sync_resource_version() == head
            })
            .await;
        }
        env.server.faults().compact_all();
        env.server.faults().close_watches();
        let watches = env.watches();
        env.watches_reach(watches + 1).await;
        if bookmarks {
            // Nothing to wait for: give a wrong relist a moment to show up.
            tokio::time::sleep(Duration::from_millis(300)).await;
        } else {
            env.lists_reach(2).await;
        }
        env.converged("selective watch").await;
        let lists = env.lists();
        env.stop().await;
        lists
    };
    assert_eq!(run(true).await, 1, "bookmarks: no relist");
    assert_eq!(run(false).await, 2, "no bookmarks: 410 and a relist");
}

async fn a_streaming_list_syncs_and_goes_on_watching() {
    let env = start(
        Config::for_tests(Duration::from_millis(100)),
        |s| {
            for i in 0..5 {
                s.create(&pod(&format!("p{i}"), 0)).unwrap();
            }
        },
        None,
        |r| r.with_streaming_list(key_func::<Pod>()),
    )
    .await;
    assert_eq!(env.shapes()[0], "watch@", "{:?}", env.shapes());
    env.churn(0);
    env.converged("after churn").await;
    assert_eq!(env.lists(), 0, "{:?}", env.shapes());
    env.stop().await;
}

async fn a_refused_streaming_list_falls_back_to_list_and_watch() {
    let env = start(
        Config::for_tests(Duration::from_millis(100)),
        |s| {
            s.create(&pod("p0", 0)).unwrap();
            // A server without streaming lists answers sendInitialEvents with 422.
            s.faults().fail_next(
                Verb::Watch,
                1,
                Failure::Status(StatusError::custom(
                    422,
                    "Invalid",
                    "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled",
                )),
            );
        },
        None,
        |r| r.with_streaming_list(key_func::<Pod>()),
    )
    .await;
    let shapes = env.shapes();
    assert_eq!(shapes[..3], ["watch@", "list@0", "watch@2"], "{shapes:?}");
    env.churn(0);
    env.converged("after churn").await;
    env.stop().await;
}

async fn a_large_collection_is_listed_in_pages_on_a_consistent_relist() {
    let env = start(
        Config::for_tests(Duration::from_millis(100)),
        |s| {
            for i in 0..1_200 {
                s.create(&pod(&format!("p{i}"), 0)).unwrap();
            }
        },
        None,
        |r| r,
    )
    .await;
    // A too-large version mid-stream: the relist is at "" and so paginated by 500.
    env.watching().await;
    env.server
        .faults()
        .inject_watch_error(StatusError::too_large_resource_version("999999", "5"));
    env.lists_reach(2).await;
    // The relist is done when the next watch starts.
    env.watches_reach(2).await;
    env.converged("after the consistent relist").await;
    let shapes = env.shapes();
    let pages = env.calls.lock().iter().filter(|c| c.kind == "page").count();
    assert!(shapes.contains(&"list@".to_owned()), "{shapes:?}");
    assert_eq!(pages, 2, "1,200 objects in pages of 500: {shapes:?}");
    assert_eq!(env.store.len(), 1_200);
    env.stop().await;
}

/// The list requests the server received, as `(resourceVersion, limit, continue)` query values.
fn list_queries(server: &ApiServer) -> Vec<(Option<String>, Option<String>, Option<String>)> {
    server
        .recorded_requests()
        .iter()
        .filter(|r| r.method == "GET" && !r.is_watch())
        .map(|r| {
            (
                r.param("resourceVersion"),
                r.param("limit"),
                r.param("continue"),
            )
        })
        .collect()
}

/// 1,100 pods (more than two pages of 500), requests recorded, the first sync done.
async fn start_recording_three_pages() -> Env {
    start(
        Config::for_tests(Duration::from_millis(100)),
        |server| {
            server.record_requests(true);
            for i in 0..1_100 {
                server.create(&pod(&format!("p{i:04}"), 0)).unwrap();
            }
        },
        None,
        |r| r,
    )
    .await
}

async fn every_list_on_the_wire_carries_limit_500_at_0_at_a_version_and_on_continue_pages() {
    let env = start_recording_three_pages().await;
    // The first list at "0" is served whole from the server's cache, which ignores the limit.
    let first = list_queries(&env.server);
    assert_eq!(
        first,
        [(Some("0".into()), Some("500".into()), None)],
        "{:?}",
        env.server.recorded_requests()
    );

    // A relist at the last version: read at exactly that version, in pages.
    env.watching_for_a_while().await;
    let last = env.reflector.last_sync_resource_version();
    env.server
        .faults()
        .inject_watch_error(StatusError::expired("too old resource version"));
    env.wait_for("the relist's three pages", |e| {
        list_queries(&e.server).len() >= 4
    })
    .await;
    env.converged("after the paginated relist").await;
    let lists = list_queries(&env.server);
    assert_eq!(
        lists[1],
        (Some(last), Some("500".into()), None),
        "{lists:?}"
    );
    for (rv, limit, token) in &lists[2..4] {
        assert_eq!(limit.as_deref(), Some("500"), "{lists:?}");
        assert!(token.is_some(), "a continue page: {lists:?}");
        assert_eq!(*rv, None, "a continue page carries no version: {lists:?}");
    }
    assert_eq!(lists.len(), 4, "{lists:?}");
    env.stop().await;
}

/// Pagination is driven by `continue` alone: a `remainingItemCount` that says the list is done
/// (or says nothing) changes neither how many pages the reflector reads nor what it caches.
async fn a_wrong_or_missing_remaining_item_count_changes_nothing() {
    let env = start_recording_three_pages().await;
    for (round, count) in [RemainingItemCount::Off(-1_000), RemainingItemCount::Omitted]
        .into_iter()
        .enumerate()
    {
        env.server.faults().set_remaining_item_count(count);
        env.churn(round as u32 + 1);
        env.watching_for_a_while().await;
        let before = list_queries(&env.server).len();
        env.server
            .faults()
            .inject_watch_error(StatusError::expired("too old resource version"));
        env.wait_for("the relist's three pages", |e| {
            list_queries(&e.server).len() >= before + 3
        })
        .await;
        env.converged(&format!("after a relist with {count:?}"))
            .await;
        let pages = &list_queries(&env.server)[before..];
        assert_eq!(pages.len(), 3, "{count:?}: {pages:?}");
        assert!(
            pages[1..].iter().all(|(_, _, token)| token.is_some()),
            "{pages:?}"
        );
        // The pods seeded and one created per round.
        assert_eq!(env.store.len(), 1_101 + round);
    }
    env.stop().await;
}

/// Against a server whose resource versions are opaque strings (`x` and hex, ordered
/// differently as text), the reflector lists, watches, resumes its watches, relists after a
/// 410 at its last version, and converges: it passes the versions back as it got them and never
/// reads them as numbers.
async fn opaque_resource_versions_are_passed_back_never_read() {
    let config = Config {
        opaque_resource_versions: true,
        // Revisions past 0xf and 0xff early, where hex and decimal order part.
        initial_resource_version: 250,
        ..Config::for_tests(Duration::from_millis(100))
    };
    let env = start(
        config,
        |server| {
            for i in 0..5 {
                server.create(&pod(&format!("p{i}"), 0)).unwrap();
            }
        },
        None,
        |r| r,
    )
    .await;
    for round in 0..5 {
        env.churn(round);
        env.converged("after churn").await;
    }
    let watches = env.watches();
    env.watches_reach(watches + 2).await;
    env.converged("after watch timeouts").await;
    assert_eq!(env.lists(), 1, "{:?}", env.shapes());
    let last = env.reflector.last_sync_resource_version();
    assert!(last.starts_with('x'), "{last}");
    assert!(
        env.cached().values().all(|rv| rv.starts_with('x')),
        "{:?}",
        env.cached()
    );

    // Missed changes and a compaction: a 410, then a relist at the last (opaque) version.
    miss_changes_then_compact(&env).await;
    env.converged("after a 410").await;
    assert!(!env.cached().contains_key("demo/p0"));
    let shapes = env.shapes();
    assert_eq!(env.lists(), 2, "{shapes:?}");
    assert!(
        shapes[1..]
            .iter()
            .all(|s| s.ends_with('@') || s.contains("@x")),
        "{shapes:?}"
    );
    assert!(env.errors.lock().iter().any(|e| e.starts_with("Expired")));
    env.stop().await;
}

/// Every scenario above, once per encoding: protobuf (what the adapter asks for by default, and
/// the simulator serves for pods) and JSON.
macro_rules! in_both_encodings {
    ($($name:ident),* $(,)?) => {
        mod protobuf {
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name().await
                }
            )*
        }
        mod json {
            $(
                #[tokio::test]
                async fn $name() {
                    super::JSON.with(|json| json.set(true));
                    super::$name().await
                }
            )*
        }
    };
}

in_both_encodings!(
    lists_then_watches_and_follows_changes_without_relisting,
    a_dropped_connection_resumes_without_a_relist,
    a_connection_dropped_inside_an_event_resumes_from_the_last_complete_event,
    a_lagging_watch_cache_leads_to_a_consistent_relist,
    a_watch_dropped_at_once_without_events_is_a_very_short_watch_and_relists,
    a_torn_event_is_discarded_and_the_watch_resumes_without_a_relist,
    a_garbage_line_is_a_decode_error_then_a_relist_or_a_rewatch_inside_the_retry_window,
    a_410_on_watch_start_relists_in_every_flavour,
    error_events_mid_stream_follow_the_rules,
    duplicate_events_leave_the_store_right,
    restarts_and_resets_converge,
    a_backward_reset_recovers_through_the_too_large_path_once_a_relist_happens,
    a_failing_server_sees_a_bounded_request_rate_then_converges,
    a_slow_stream_is_not_mistaken_for_a_failure,
    bookmarks_keep_a_selective_watch_resumable_past_compaction,
    a_streaming_list_syncs_and_goes_on_watching,
    a_refused_streaming_list_falls_back_to_list_and_watch,
    a_large_collection_is_listed_in_pages_on_a_consistent_relist,
    every_list_on_the_wire_carries_limit_500_at_0_at_a_version_and_on_continue_pages,
    a_wrong_or_missing_remaining_item_count_changes_nothing,
    opaque_resource_versions_are_passed_back_never_read,
);
