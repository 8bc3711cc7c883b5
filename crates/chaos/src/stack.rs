//! The system under test: two informers over HTTP (kube-client) against the simulator, their
//! handlers, and the checks that compare them with the server.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use informer::{
    HandlerOptions, HandlerRegistration, InformerBuilder, InformerError, ResourceEventHandlerExt,
    SharedIndexInformer,
};
use informer_apiserver::{
    ApiServer, Failure as ServerFailure, SlowStream, StatusError, Verb as ServerVerb,
};
use informer_kube::{
    Encoding, EncodingCounts, KubeIdentity, KubeListerWatcher, key_func, namespace_index_func,
    pod_node_index_func,
};
use informer_reflector::BackoffConfig;
use informer_store::{NAMESPACE_INDEX, ThreadSafeStore, indexers};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use serde_json::json;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::journal::{Journal, JournalOptions, Write, WriteKind, WriteLog, key_of, rv_of};
use crate::record::{CallLog, Recording, check_relists};
use crate::scenario::{
    Fault, NODES, Op, PodKey, RequestFailure, RequestVerb, SELECTOR, WatchError,
};

/// An informer of pods over HTTP whose requests are recorded.
pub type PodInformer = SharedIndexInformer<Pod>;

/// The name of the node index.
pub const NODE_INDEX: &str = "node";

/// The node a pod is on, as a number (`node-3` → 3).
pub fn node_number(pod: &Pod) -> Option<u32> {
    pod.spec
        .as_ref()?
        .node_name
        .as_deref()?
        .strip_prefix("node-")?
        .parse()
        .ok()
}

/// Whether a pod carries `tier=gold`.
pub fn is_gold(pod: &Pod) -> bool {
    pod.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("tier"))
        .is_some_and(|t| t == "gold")
}

/// The filtered handler's filter: pods on even-numbered nodes.
fn on_even_node(pod: &Pod) -> bool {
    node_number(pod).is_some_and(|n| n % 2 == 0)
}

/// A pod for the simulator.
pub fn pod(key: &PodKey, node: u32, gold: bool) -> Pod {
    serde_json::from_value(json!({
        "metadata": {
            "name": key.name,
            "namespace": key.namespace,
            "labels": {"tier": if gold { "gold" } else { "silver" }, "app": "chaos"},
        },
        "spec": {
            "nodeName": format!("node-{}", node % NODES.max(1)),
            "containers": [{"name": "app", "image": "registry.local/app:1"}],
        },
    }))
    .expect("a valid pod")
}

/// How the stack is set up.
#[derive(Debug, Clone)]
pub struct StackOptions {
    /// The reflectors' minimum watch timeout.
    pub min_watch_timeout: Duration,
    /// The reflectors start with a streaming list.
    pub streaming_list: bool,
    /// The reflectors list in small pages and apply each page of a relist as it arrives.
    pub relist_by_page: bool,
    /// How long the slow handler sleeps per notification.
    pub slow_delay: Duration,
    /// The slow handler's buffer (notifications), and the stream subscriber's: small, so that
    /// they fall behind and coalesce per key.
    pub slow_buffer: usize,
    /// Keep every notification of the unfiltered handlers, to check them against the writes.
    pub keep_notes: bool,
    /// Record when the main handler saw each change (handler lag).
    pub record_times: bool,
    /// The lister-watchers ask for JSON only (`KubeListerWatcher::json_only`), not for
    /// protobuf with JSON as the fallback.
    pub json_only: bool,
}

/// The informers, their handlers and their tasks.
pub struct Stack {
    /// Every pod; `namespace` and `node` indexes; three handlers.
    pub all: Arc<PodInformer>,
    /// Pods matching [`SELECTOR`]; one handler.
    pub gold: Arc<PodInformer>,
    /// Requests of `all`.
    pub all_log: Arc<CallLog>,
    /// Requests of `gold`.
    pub gold_log: Arc<CallLog>,
    /// Every notification of `all`.
    pub main: Arc<Journal>,
    /// `all`'s notifications for pods on even nodes.
    pub filtered: Arc<Journal>,
    /// Every notification of `all`, handled slowly.
    pub slow: Arc<Journal>,
    /// Every notification of `gold`.
    pub gold_journal: Arc<Journal>,
    /// Every event of a stream subscribed to `all`, read by a task of its own.
    pub stream: Arc<Journal>,
    /// The five registrations (the stream's last).
    pub registrations: Vec<HandlerRegistration>,
    /// Clones of the two lister-watchers (`all`'s, `gold`'s): the encodings they read.
    read: [KubeListerWatcher<Pod>; 2],
    stop: CancellationToken,
    tasks: Vec<JoinHandle<Result<(), InformerError>>>,
}

impl std::fmt::Debug for Stack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stack")
            .field("registrations", &self.registrations)
            .finish_non_exhaustive()
    }
}

/// What is wrong with the encodings the informer of `name` read, `chosen` the one it was set
/// to read: on a JSON-only seed no protobuf response and some JSON; otherwise some protobuf and
/// no JSON at all (the simulator serves the built-in types in protobuf, and its schema is the
/// client's, so nothing may make the lister-watcher give protobuf up).
pub fn check_encoding(name: &str, chosen: Encoding, counts: EncodingCounts) -> Option<String> {
    let fine = match chosen {
        Encoding::Json => counts.protobuf == 0 && counts.json > 0,
        Encoding::Protobuf => counts.protobuf > 0 && counts.json == 0 && counts.schema_gaps == 0,
    };
    (!fine).then(|| {
        format!(
            "informer of {name}: set to read {}, read {} protobuf and {} JSON responses ({} \
             schema gaps)",
            chosen.as_str(),
            counts.protobuf,
            counts.json,
            counts.schema_gaps
        )
    })
}

/// `counts` added up.
pub fn sum_counts(counts: impl IntoIterator<Item = EncodingCounts>) -> EncodingCounts {
    counts
        .into_iter()
        .fold(EncodingCounts::default(), |sum, c| EncodingCounts {
            json: sum.json + c.json,
            protobuf: sum.protobuf + c.protobuf,
            schema_gaps: sum.schema_gaps + c.schema_gaps,
        })
}

/// A kube client for the simulator, with kube-client's own retries off: the reflector sees
/// every 429 and 5xx itself.
pub fn client(server: &ApiServer) -> Result<kube::Client, String> {
    client_for(&server.url())
}

/// [`client`] for a simulator at `url` (one in another process).
pub fn client_for(url: &str) -> Result<kube::Client, String> {
    let url = url.parse().map_err(|e| format!("server URL: {e}"))?;
    let mut config = kube::Config::new(url);
    config.default_retry = false;
    kube::Client::try_from(config).map_err(|e| format!("kube client: {e}"))
}

fn informer(
    lister_watcher: Recording<KubeListerWatcher<Pod>>,
    options: &StackOptions,
) -> PodInformer {
    let builder = SharedIndexInformer::builder(lister_watcher, KubeIdentity).cache(Arc::new(
        ThreadSafeStore::with_indexers(
            key_func::<Pod>(),
            indexers([
                (NAMESPACE_INDEX, namespace_index_func::<Pod>()),
                (NODE_INDEX, pod_node_index_func()),
            ]),
        ),
    ));
    configure(
        builder,
        options.min_watch_timeout,
        options.streaming_list,
        options.relist_by_page,
    )
    .build()
}

/// How every informer of a run lists and watches: a fast backoff, the run's minimum watch
/// timeout, a streaming list or not, and a relist by page (in small pages) or not.
pub fn configure<K: Send + Sync + 'static>(
    informer: InformerBuilder<K>,
    min_watch_timeout: Duration,
    streaming_list: bool,
    relist_by_page: bool,
) -> InformerBuilder<K> {
    informer
        .streaming_list(streaming_list)
        .relist_by_page(relist_by_page)
        .reflector_config(move |r| {
            let r = r
                .with_backoff(BackoffConfig {
                    initial: Duration::from_millis(10),
                    cap: Duration::from_millis(250),
                    ..BackoffConfig::default()
                })
                .with_min_watch_timeout(min_watch_timeout);
            if relist_by_page {
                r.with_page_size(crate::scenario::SMALL_PAGE)
            } else {
                r
            }
        })
}

impl Stack {
    /// Builds both informers and their handlers, and starts them.
    pub fn start(client: &kube::Client, options: &StackOptions) -> Result<Stack, String> {
        let encoding = |lw: KubeListerWatcher<Pod>| {
            if options.json_only {
                lw.json_only()
            } else {
                lw
            }
        };
        let all_lw = encoding(KubeListerWatcher::new(Api::<Pod>::all(client.clone())));
        let gold_lw =
            encoding(KubeListerWatcher::new(Api::<Pod>::all(client.clone())).labels(SELECTOR));
        let read = [all_lw.clone(), gold_lw.clone()];
        let (all_lw, gold_lw) = (Recording::new(all_lw), Recording::new(gold_lw));
        let (all_log, gold_log) = (all_lw.log(), gold_lw.log());
        let all = Arc::new(informer(all_lw, options));
        let gold = Arc::new(informer(gold_lw, options));
        let notes = JournalOptions {
            keep_notes: options.keep_notes,
            ..JournalOptions::default()
        };
        let main = Arc::new(Journal::new(
            "main",
            Arc::clone(&all_log),
            JournalOptions {
                record_times: options.record_times,
                ..notes.clone()
            },
        ));
        let filtered = Arc::new(Journal::new(
            "filtered",
            Arc::clone(&all_log),
            JournalOptions::default(),
        ));
        let slow = Arc::new(Journal::new(
            "slow",
            Arc::clone(&all_log),
            JournalOptions {
                delay: options.slow_delay,
                ..notes.clone()
            },
        ));
        let stream = Arc::new(Journal::new("stream", Arc::clone(&all_log), notes.clone()));
        let gold_journal = Arc::new(Journal::new("gold", Arc::clone(&gold_log), notes));
        let err = |e: InformerError| format!("registering a handler: {e}");
        let small = HandlerOptions::new().buffer(options.slow_buffer);
        let mut events = all.subscribe(small.clone()).map_err(err)?;
        let registrations = vec![
            all.add_event_handler(Arc::clone(&main), HandlerOptions::new())
                .map_err(err)?,
            all.add_event_handler(
                Arc::clone(&filtered).filtered(on_even_node),
                HandlerOptions::new(),
            )
            .map_err(err)?,
            all.add_event_handler(Arc::clone(&slow), small)
                .map_err(err)?,
            gold.add_event_handler(Arc::clone(&gold_journal), HandlerOptions::new())
                .map_err(err)?,
            events.registration().clone(),
        ];
        let stop = CancellationToken::new();
        let mut tasks: Vec<_> = [&all, &gold]
            .into_iter()
            .map(|informer| {
                let (informer, stop) = (Arc::clone(informer), stop.clone());
                tokio::spawn(async move { informer.run(stop).await })
            })
            .collect();
        // The stream's reader, yielding to the runtime now and then (an async consumer that
        // awaits between events); it ends when the informer stops.
        let reader = Arc::clone(&stream);
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            while let Some(event) = events.next().await {
                event.dispatch(&*reader);
                n += 1;
                if n.is_multiple_of(16) {
                    tokio::task::yield_now().await;
                }
            }
            Ok(())
        }));
        Ok(Stack {
            all,
            gold,
            all_log,
            gold_log,
            main,
            filtered,
            slow,
            gold_journal,
            stream,
            registrations,
            read,
            stop,
            tasks,
        })
    }

    /// The responses both informers read, by encoding, together.
    pub fn encoding_counts(&self) -> EncodingCounts {
        sum_counts(self.read.iter().map(KubeListerWatcher::encoding_counts))
    }

    /// Whether each informer read the encoding it was given (see [`check_encoding`]).
    pub fn check_encodings(&self, chosen: Encoding) -> Vec<String> {
        [("all pods", &self.read[0]), ("gold pods", &self.read[1])]
            .into_iter()
            .filter_map(|(name, lw)| check_encoding(name, chosen, lw.encoding_counts()))
            .collect()
    }

    /// Notifications handled, all handlers together.
    pub fn notifications(&self) -> u64 {
        [
            &self.main,
            &self.filtered,
            &self.slow,
            &self.gold_journal,
            &self.stream,
        ]
        .iter()
        .map(|j| j.notifications())
        .sum()
    }

    /// Tombstones received, all handlers together.
    pub fn tombstones(&self) -> u64 {
        [
            &self.main,
            &self.filtered,
            &self.slow,
            &self.gold_journal,
            &self.stream,
        ]
        .iter()
        .map(|j| j.tombstones())
        .sum()
    }

    /// Notifications the consumers took into per-key coalescing (the slow handler and the
    /// stream, with their small buffers; the others rarely).
    pub fn coalesced(&self) -> u64 {
        self.registrations
            .iter()
            .map(|r| r.coalesced() as u64)
            .sum()
    }

    /// Lists after the first, both informers together.
    pub fn relists(&self) -> u64 {
        self.all_log.lists().saturating_sub(1) + self.gold_log.lists().saturating_sub(1)
    }

    /// What still differs between the server and the caches or the handlers' views; empty once
    /// everything has converged.
    pub fn differences(&self, server: &ApiServer) -> Vec<String> {
        match ServerPod::list(server) {
            Ok(pods) => self.differences_from(&pods),
            Err(e) => vec![e],
        }
    }

    /// [`differences`](Self::differences) from the server's pods as given.
    pub fn differences_from(&self, pods: &[ServerPod]) -> Vec<String> {
        let mut problems = Vec::new();
        let everything: BTreeMap<String, u64> =
            pods.iter().map(|p| (p.key.clone(), p.rv)).collect();
        let golden: BTreeMap<String, u64> = pods
            .iter()
            .filter(|p| p.gold)
            .map(|p| (p.key.clone(), p.rv))
            .collect();
        let cached = self.all.lister().list(&informer_store::Everything);
        let cache: BTreeMap<String, u64> = cached.iter().map(|p| (key_of(p), rv_of(p))).collect();
        let even: BTreeMap<String, u64> = cached
            .iter()
            .filter(|p| on_even_node(p))
            .map(|p| (key_of(p), rv_of(p)))
            .collect();
        let gold_cache: BTreeMap<String, u64> = self
            .gold
            .lister()
            .list(&informer_store::Everything)
            .iter()
            .map(|p| (key_of(p), rv_of(p)))
            .collect();
        compare("cache of every pod", &everything, &cache, &mut problems);
        // A terminating pod is in the cache, marked as on the server, until it is removed.
        let cached_marks: BTreeMap<String, _> = cached
            .iter()
            .map(|p| (key_of(p), deletion_mark(p)))
            .collect();
        for p in pods {
            if let Some(mark) = &p.deleting
                && cached_marks.get(&p.key) != Some(&Some(mark.clone()))
            {
                problems.push(format!(
                    "cache of every pod: {} is terminating on the server, not in the cache",
                    p.key
                ));
            }
        }
        compare("cache of gold pods", &golden, &gold_cache, &mut problems);
        for (journal, expected) in [
            (&self.main, &cache),
            (&self.slow, &cache),
            (&self.stream, &cache),
            (&self.filtered, &even),
            (&self.gold_journal, &gold_cache),
        ] {
            let found = journal.diff(expected, 6);
            let more = if found.len() > 5 { ", and more" } else { "" };
            problems.extend(
                found
                    .iter()
                    .take(5)
                    .map(|d| format!("{} handler: {d}{more}", journal.name())),
            );
        }
        let backlog: usize = self
            .registrations
            .iter()
            .map(HandlerRegistration::backlog)
            .sum();
        if backlog > 0 {
            problems.push(format!("{backlog} notifications still buffered"));
        }
        problems
    }

    /// Waits up to `bound` for [`differences`](Self::differences) to be empty; returns how
    /// long it took, or what still differs.
    pub async fn converge(
        &self,
        server: &ApiServer,
        bound: Duration,
    ) -> Result<Duration, Vec<String>> {
        let begun = Instant::now();
        loop {
            let problems = self.differences(server);
            if problems.is_empty() {
                return Ok(begun.elapsed());
            }
            if begun.elapsed() > bound {
                return Err(problems);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// [`converge`](Self::converge) to the server's pods as given (a server that no longer
    /// changes).
    pub async fn converge_to(
        &self,
        pods: &[ServerPod],
        bound: Duration,
    ) -> Result<Duration, Vec<String>> {
        let begun = Instant::now();
        loop {
            let problems = self.differences_from(pods);
            if problems.is_empty() {
                return Ok(begun.elapsed());
            }
            if begun.elapsed() > bound {
                return Err(problems);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The checks that need no waiting, once converged: the indexes agree with the cache, no
    /// handler saw a notification that did not fit its view, every notification of the
    /// unfiltered handlers matches a write (and every tombstone a missed removal), and every
    /// relist followed a reason.
    pub fn check_history(&self, writes: Option<&WriteLog>) -> Vec<String> {
        let mut problems = Vec::new();
        problems.extend(check_indexes(&self.all));
        problems.extend(check_indexes(&self.gold));
        for journal in [
            &self.main,
            &self.filtered,
            &self.slow,
            &self.gold_journal,
            &self.stream,
        ] {
            problems.extend(journal.violations());
        }
        if let Some(writes) = writes {
            problems.extend(writes.check_notes("main", &self.main.notes(), false));
            problems.extend(writes.check_notes("slow", &self.slow.notes(), false));
            problems.extend(writes.check_notes("stream", &self.stream.notes(), false));
            problems.extend(writes.check_notes("gold", &self.gold_journal.notes(), true));
        }
        for (name, log) in [("every pod", &self.all_log), ("gold", &self.gold_log)] {
            if let Err(e) = check_relists(&log.calls()) {
                problems.push(format!("informer of {name}: {e}"));
            }
        }
        problems
    }

    /// Stops both informers and waits (up to `bound`) for them: every handler worker and the
    /// pop loops joined.
    pub async fn shutdown(self, bound: Duration) -> Vec<String> {
        let mut problems = Vec::new();
        self.stop.cancel();
        for task in self.tasks {
            match tokio::time::timeout(bound, task).await {
                Ok(Ok(Ok(()))) => {}
                Ok(Ok(Err(e))) => problems.push(format!("informer ended with an error: {e}")),
                Ok(Err(e)) => problems.push(format!("informer task failed: {e}")),
                Err(_) => problems.push(format!("informer did not stop within {bound:?}")),
            }
        }
        if !(self.all.is_stopped() && self.gold.is_stopped()) {
            problems.push("an informer does not report itself stopped".to_owned());
        }
        let running = self
            .registrations
            .iter()
            .filter(|r| !r.is_stopped())
            .count();
        if running > 0 {
            problems.push(format!(
                "{running} handler workers still running after stop"
            ));
        }
        problems
    }
}

/// What the convergence checks need to know of a pod on the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerPod {
    /// `namespace/name`.
    pub key: String,
    /// Its resource version.
    pub rv: u64,
    /// It matches [`SELECTOR`].
    pub gold: bool,
    /// Its deletion timestamp (as JSON), if it is terminating.
    pub deleting: Option<String>,
}

impl ServerPod {
    /// The summary of `pod`.
    pub fn of(pod: &Pod) -> Self {
        Self {
            key: key_of(pod),
            rv: rv_of(pod),
            gold: is_gold(pod),
            deleting: deletion_mark(pod),
        }
    }

    /// Every pod on `server`.
    pub fn list(server: &ApiServer) -> Result<Vec<Self>, String> {
        let (pods, _) = server
            .list::<Pod>(None)
            .map_err(|e| format!("listing the server's pods: {e}"))?;
        Ok(pods.iter().map(Self::of).collect())
    }
}

/// A pod's deletion timestamp, as JSON.
fn deletion_mark(pod: &Pod) -> Option<String> {
    let mark = pod.metadata.deletion_timestamp.as_ref()?;
    Some(serde_json::to_string(mark).unwrap_or_default())
}

fn compare(
    what: &str,
    expected: &BTreeMap<String, u64>,
    actual: &BTreeMap<String, u64>,
    problems: &mut Vec<String>,
) {
    let mut found = 0;
    for (key, rv) in expected {
        let problem = match actual.get(key) {
            None => format!("{what}: {key} missing (expected at {rv})"),
            Some(seen) if seen != rv => format!("{what}: {key} at {seen}, expected at {rv}"),
            Some(_) => continue,
        };
        found += 1;
        if found <= 5 {
            problems.push(problem);
        }
    }
    for key in actual.keys().filter(|k| !expected.contains_key(*k)) {
        found += 1;
        if found <= 5 {
            problems.push(format!("{what}: {key} present, expected absent"));
        }
    }
    if found > 5 {
        problems.push(format!("{what}: {} more differences", found - 5));
    }
}

/// The namespace and node indexes of an informer's cache, against its contents.
fn check_indexes(informer: &PodInformer) -> Vec<String> {
    let indexer = informer.lister();
    let mut by_namespace: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut by_node: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for p in informer.lister().list(&informer_store::Everything) {
        let key = key_of(&p);
        if let Some(ns) = p.metadata.namespace.clone() {
            by_namespace.entry(ns).or_default().push(key.clone());
        }
        if let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.clone()) {
            by_node.entry(node).or_default().push(key);
        }
    }
    let mut problems = Vec::new();
    for (index, expected) in [(NAMESPACE_INDEX, by_namespace), (NODE_INDEX, by_node)] {
        let mut values = indexer.index_values(index);
        values.sort();
        let keys: Vec<String> = expected.keys().cloned().collect();
        if values != keys {
            problems.push(format!(
                "{index} index lists {values:?}, the cache has {keys:?}"
            ));
        }
        for (value, mut keys) in expected {
            keys.sort();
            match indexer.index_keys(index, &value) {
                Ok(mut indexed) => {
                    indexed.sort();
                    if indexed != keys {
                        problems.push(format!(
                            "{index} index for {value}: {indexed:?}, the cache has {keys:?}"
                        ));
                    }
                }
                Err(e) => problems.push(format!("{index} index for {value}: {e}")),
            }
        }
    }
    problems
}

/// The finalizer the churn adds and removes.
pub const FINALIZER: &str = "chaos.example/hold";

/// Applies one write to the server and records it.
pub fn apply(server: &ApiServer, op: &Op, writes: &WriteLog) -> Result<(), String> {
    let at = Instant::now();
    let patch = |key: &PodKey, body: serde_json::Value| {
        server.patch::<Pod>(Some(&key.namespace), &key.name, &body)
    };
    let (key, result, deleted) = match op {
        Op::Create { key, node, gold } => (key, server.create(&pod(key, *node, *gold)), false),
        Op::Move { key, node } => (
            key,
            patch(key, json!({"spec": {"nodeName": format!("node-{node}")}})),
            false,
        ),
        Op::Annotate { key, value } => (
            key,
            patch(
                key,
                json!({"metadata": {"annotations": {"chaos": value.to_string()}}}),
            ),
            false,
        ),
        Op::Relabel { key, gold } => (
            key,
            patch(
                key,
                json!({"metadata": {"labels": {"tier": if *gold { "gold" } else { "silver" }}}}),
            ),
            false,
        ),
        Op::Delete { key } => (
            key,
            server.delete::<Pod>(Some(&key.namespace), &key.name),
            true,
        ),
        Op::Terminate { key, grace_seconds } => {
            let marked = server
                .delete_with_grace::<Pod>(
                    Some(&key.namespace),
                    &key.name,
                    Some(i64::from(*grace_seconds)),
                )
                .map_err(|e| format!("{op:?} failed: {e}"))?;
            if marked.metadata.deletion_timestamp.is_none() {
                return Err(format!("{op:?}: the pod is not marked for deletion"));
            }
            (key, Ok(marked), false)
        }
        Op::FinishDeletion { key } => {
            // The runner is the only writer: the grace-0 mark and the removal (if any) take
            // the revisions right after `before`.
            let before = server.resource_version();
            let last = server
                .finish_deletion::<Pod>(Some(&key.namespace), &key.name)
                .map_err(|e| format!("{op:?} failed: {e}"))?;
            let gone = server.get::<Pod>(Some(&key.namespace), &key.name).is_err();
            if gone {
                let step = (rv_of(&last) - before) / 2;
                writes.record(
                    key.to_string(),
                    Write {
                        rv: before + step,
                        kind: WriteKind::Upsert {
                            gold: is_gold(&last),
                        },
                        at,
                    },
                );
            }
            (key, Ok(last), gone)
        }
        Op::AddFinalizer { key } => (
            key,
            patch(key, json!({"metadata": {"finalizers": [FINALIZER]}})),
            false,
        ),
        Op::RemoveFinalizer { key } => {
            let result = patch(key, json!({"metadata": {"finalizers": null}}));
            // Removing the last finalizer of a pod whose deletion was finished removes it.
            let gone = server.get::<Pod>(Some(&key.namespace), &key.name).is_err();
            (key, result, gone)
        }
    };
    let written = result.map_err(|e| format!("{op:?} failed: {e}"))?;
    let kind = if deleted {
        WriteKind::Delete
    } else {
        WriteKind::Upsert {
            gold: is_gold(&written),
        }
    };
    writes.record(
        key.to_string(),
        Write {
            rv: rv_of(&written),
            kind,
            at,
        },
    );
    Ok(())
}

/// Injects one fault.
pub fn inject(server: &ApiServer, fault: &Fault) {
    let faults = server.faults();
    match fault {
        Fault::DropWatches => faults.drop_watches(),
        Fault::DropMidEvent => faults.drop_watches_mid_event(),
        Fault::CloseWatches => faults.close_watches(),
        Fault::TornEvent => faults.torn_event(),
        Fault::GarbageLine => faults.garbage_line(),
        Fault::DuplicateEvent => faults.duplicate_last_event(),
        Fault::WatchError(error) => match error {
            WatchError::Expired => faults
                .inject_watch_error(StatusError::expired("too old resource version: injected")),
            WatchError::Gone => {
                faults.inject_watch_error(StatusError::gone("too old resource version: injected"));
            }
            WatchError::Internal => faults.inject_watch_error(StatusError::internal("injected")),
            WatchError::TooManyRequests { retry_after } => {
                faults.inject_watch_error(StatusError::too_many_requests("injected", *retry_after))
            }
            WatchError::TooLarge => {
                let head = server.resource_version();
                faults.inject_watch_error(StatusError::too_large_resource_version(
                    &(head + 1).to_string(),
                    &head.to_string(),
                ));
            }
            WatchError::NotAStatus => faults.inject_watch_error_object(json!({})),
        },
        Fault::FailNext {
            verb,
            times,
            failure,
        } => {
            let verb = match verb {
                RequestVerb::List => ServerVerb::List,
                RequestVerb::Watch => ServerVerb::Watch,
            };
            let failure = match failure {
                RequestFailure::TooManyRequests { retry_after } => {
                    ServerFailure::too_many_requests(*retry_after)
                }
                RequestFailure::Throttled { retry_after } => ServerFailure::throttled(*retry_after),
                RequestFailure::Internal => ServerFailure::internal("injected"),
                RequestFailure::Unavailable => ServerFailure::unavailable(),
            };
            faults.fail_next(verb, *times, failure);
        }
        Fault::Compact { drop_watches } => {
            faults.compact_all();
            if *drop_watches {
                faults.drop_watches();
            }
        }
        Fault::Restart => faults.restart(),
        Fault::Bookmarks(on) => faults.set_bookmarks(*on),
        Fault::SlowStream(slow) => {
            faults.set_slow_stream(slow.map(|(chunk_bytes, delay)| SlowStream {
                chunk_bytes,
                delay: Duration::from_millis(delay),
            }))
        }
    }
}

/// Ends every lasting fault: queued request failures, bookmarks off, slow streams.
pub fn calm(server: &ApiServer) {
    let faults = server.faults();
    faults.clear_failures();
    faults.set_bookmarks(true);
    faults.set_slow_stream(None);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(json: u64, protobuf: u64, schema_gaps: u64) -> EncodingCounts {
        EncodingCounts {
            json,
            protobuf,
            schema_gaps,
        }
    }

    #[test]
    fn the_encoding_check_wants_only_the_chosen_encoding() {
        let check = |chosen, c| check_encoding("pods", chosen, c);
        assert_eq!(check(Encoding::Json, counts(5, 0, 0)), None);
        assert_eq!(check(Encoding::Protobuf, counts(0, 5, 0)), None);
        // A protobuf response on a JSON-only seed; nothing read at all.
        assert!(check(Encoding::Json, counts(5, 1, 0)).is_some());
        assert!(check(Encoding::Json, counts(0, 0, 0)).is_some());
        // JSON on a protobuf seed, a schema gap, nothing read.
        assert!(check(Encoding::Protobuf, counts(1, 5, 0)).is_some());
        assert!(check(Encoding::Protobuf, counts(0, 5, 1)).is_some());
        assert_eq!(
            check(Encoding::Protobuf, counts(0, 0, 0)).as_deref(),
            Some(
                "informer of pods: set to read protobuf, read 0 protobuf and 0 JSON responses \
                 (0 schema gaps)"
            )
        );
        assert_eq!(
            sum_counts([counts(1, 2, 0), counts(3, 4, 1)]),
            counts(4, 6, 1)
        );
    }
}
