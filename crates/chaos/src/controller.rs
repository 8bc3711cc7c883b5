//! The controller scenario: a reconciler (`informer-runtime`) that keeps one child ConfigMap per
//! pod, run through a seed's churn and faults, and the checks that its world converges.
//!
//! For every pod `ns/p` the controller keeps exactly one ConfigMap `ns/p-info` with
//! `data.node` = the pod's node, owned by the pod (an owner reference naming the pod's UID, with
//! `controller: true`). A pod deleted and recreated under the same name has a new UID: its
//! child follows it. A pod gone takes its children with it.
//!
//! A run takes a [`Scenario`] (its initial pods, writes, faults and server settings, as the
//! informers' runs use them) and adds the disturbances of a [`ControllerPlan`], drawn from the
//! same seed: children drifted (data or owner), deleted behind the controller's back, orphans
//! created for pods that do not exist, second children of live pods, failures injected on the
//! controller's writes, and windows of request latency. Half the seeds run the controller behind
//! a leader election on a Lease ([`ElectionPlan`]), and depose it now and then: the Lease taken
//! by another holder, an orphan created while no replica leads, the Lease given back; the next
//! term must see that orphan. Reconciles record their own invariants
//! (never two of one key at once; none before every cache synced). Once the churn stops, the
//! world on the server must converge within [`SETTLE_BOUND`]: every pod has its one child with
//! the right data and its current UID, and no other ConfigMap exists (no child of a pod UID that
//! is gone, no second child). Then the controller's `run` must return `Ok` on stop, and the
//! informers must stop cleanly.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use informer::{InformerError, SharedIndexInformer};
use informer_apiserver::{ApiServer, Failure as ServerFailure, StatusError, Verb as ServerVerb};
use informer_kube::{
    Encoding, EncodingCounts, KubeIdentity, KubeListerWatcher, OWNER_UID_INDEX, UID_INDEX,
    key_func, namespace_index_func, owner_keys, owner_uid_index_func, uid_index_func,
};
use informer_leaderelection::LeaderElector;
use informer_runtime::{Action, Controller, Request, Target};
use informer_store::{
    IndexValues, Indexers, Lister, NAMESPACE_INDEX, ThreadSafeStore, index_func, indexers,
};
use informer_workqueue::{
    BucketRateLimiter, ItemExponentialFailureRateLimiter, MaxOfRateLimiter, WorkQueue,
};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::serde::de::DeserializeOwned;
use kube::api::{DeleteParams, PostParams, Preconditions};
use kube::{Api, Resource};
use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::election::{self, ElectionPlan};
use crate::journal::WriteLog;
use crate::record::{CallLog, Recording, check_relists};
use crate::runner::{Failure, SETTLE_BOUND, Suite, on_a_runtime_of_its_own, start_server};
use crate::scenario::{NAMES_PER_NAMESPACE, NAMESPACES, Scenario, Step};
use crate::seeds::{SeedSuite, Summary, run_suite};
use crate::stack::{apply, calm, check_encoding, client, inject, sum_counts};

/// Reconciles the controller runs at once.
pub const CONCURRENCY: usize = 3;

/// The first retry of a failed key waits this long; each further failure doubles it.
pub const RETRY_BASE: Duration = Duration::from_millis(5);

/// The longest a failed key waits before its next retry.
///
/// client-go's default cap is 1,000 s. A key's wait doubles with each failure in a row; a
/// failure that ends with an event (a 409 until the cache catches up) is retried at once by that
/// event, but one that ends silently (an injected 500, then nothing changes) waits out the
/// backoff. Streaks of 14 failures of one key were seen in 500 seeds: after those the default
/// waits 5 ms × 2¹³ ≈ 41 s, past [`SETTLE_BOUND`], and the settle time would measure the rate
/// limiter rather than the controller. With a 200 ms cap a key is retried at least five times a
/// second once the faults stop, whatever its streak.
pub const RETRY_CAP: Duration = Duration::from_millis(200);

/// The overall retry budget beside the per-key backoff (client-go's bucket is 10 a second with
/// a burst of 100): generous enough that a burst of failures across every key is retried within
/// a second or two.
pub const RETRY_QPS: f64 = 200.0;

/// The burst of the overall retry budget.
pub const RETRY_BURST: usize = 200;

/// After a reconcile that wrote, its key is reconciled again this much later, event or not.
///
/// A child the controller creates, deleted behind its back before the ConfigMap informer saw it
/// (its watch down at the time, then a relist), leaves no trace in the cache: it is in neither
/// the cache nor the list, so no event says it is gone, and its pod, unchanged, never wakes the
/// controller either (seed 334 found it). So a write is checked by a later reconcile: one that
/// has nothing to write has seen the world it wanted in the caches, and any change after that
/// reaches it as an event. Until then the key comes back.
pub const VERIFY_AFTER: Duration = Duration::from_millis(100);

/// The index of ConfigMaps by the key (`namespace/name`) of each pod their owner references
/// name: finds the children of a pod whose UID the caches no longer know.
pub const OWNER_POD_INDEX: &str = "owner-pod";

/// The name of `pod`'s child: `<pod>-info`.
pub fn child_name(pod: &str) -> String {
    format!("{pod}-info")
}

/// The request a [`WriteFailure`] hits: one of the controller's writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteVerb {
    /// A `POST` (a child created).
    Create,
    /// A `PUT` (a child replaced).
    Update,
    /// A `DELETE` (a child or an orphan deleted).
    Delete,
}

/// How an injected write failure answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteFailure {
    /// `500 InternalError`.
    Internal,
    /// `503 ServiceUnavailable`.
    Unavailable,
    /// `429 TooManyRequests`, with `Retry-After: 0`.
    TooManyRequests,
    /// `409 Conflict`, as if the object had changed underneath.
    Conflict,
}

/// A disturbance of the controller's world, beside the scenario's writes and faults.
///
/// The picks are resolved against the server when the disturbance fires: `pick` indexes the
/// server's children (or pods), sorted by key, modulo their number. A pick that finds nothing
/// (no child yet) does not fire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Disturbance {
    /// Sets a child's `data.node` to `drifted`.
    DriftData {
        /// Which child.
        pick: usize,
    },
    /// Points a child's owner reference at a UID no pod has.
    DriftOwner {
        /// Which child.
        pick: usize,
    },
    /// Deletes a child behind the controller's back.
    DeleteChild {
        /// Which child.
        pick: usize,
    },
    /// Creates the child `pod-<name>-info` for a pod that does not exist (the first name from
    /// `name` on that is free in the namespace), owned by a UID no pod has.
    Orphan {
        /// The namespace, as an index into [`NAMESPACES`].
        namespace: usize,
        /// The first pod name tried, `pod-<name>`.
        name: usize,
    },
    /// Creates a second child, `<pod>-extra`, owned by a live pod.
    Extra {
        /// Which pod.
        pick: usize,
    },
    /// Fails the next `times` writes of `verb` (the controller's: nothing else writes over
    /// HTTP).
    FailWrites {
        /// Which writes.
        verb: WriteVerb,
        /// How many.
        times: usize,
        /// With what.
        failure: WriteFailure,
    },
    /// Delays every request to the server by this many milliseconds (`None`: no more).
    Latency(Option<u64>),
    /// With a leader election: the Lease is taken by another holder; once the controller has
    /// stepped down, an orphan is created as [`Disturbance::Orphan`] would create it, while no
    /// replica leads.
    Deposed {
        /// The orphan's namespace, as an index into [`NAMESPACES`].
        namespace: usize,
        /// The first pod name tried for the orphan.
        name: usize,
    },
    /// The Lease is given back (deleted): the controller leads again at its next try.
    Restored,
}

impl Disturbance {
    /// A short name for the faults-by-kind table.
    pub fn kind(&self) -> &'static str {
        match self {
            Disturbance::DriftData { .. } => "child-drift-data",
            Disturbance::DriftOwner { .. } => "child-drift-owner",
            Disturbance::DeleteChild { .. } => "child-deleted",
            Disturbance::Orphan { .. } => "orphan-created",
            Disturbance::Extra { .. } => "extra-child-created",
            Disturbance::FailWrites { verb, failure, .. } => match (verb, failure) {
                (WriteVerb::Create, WriteFailure::Internal) => "fail-create-500",
                (WriteVerb::Create, WriteFailure::Unavailable) => "fail-create-503",
                (WriteVerb::Create, WriteFailure::TooManyRequests) => "fail-create-429",
                (WriteVerb::Create, WriteFailure::Conflict) => "fail-create-409",
                (WriteVerb::Update, WriteFailure::Internal) => "fail-update-500",
                (WriteVerb::Update, WriteFailure::Unavailable) => "fail-update-503",
                (WriteVerb::Update, WriteFailure::TooManyRequests) => "fail-update-429",
                (WriteVerb::Update, WriteFailure::Conflict) => "fail-update-409",
                (WriteVerb::Delete, WriteFailure::Internal) => "fail-delete-500",
                (WriteVerb::Delete, WriteFailure::Unavailable) => "fail-delete-503",
                (WriteVerb::Delete, WriteFailure::TooManyRequests) => "fail-delete-429",
                (WriteVerb::Delete, WriteFailure::Conflict) => "fail-delete-409",
            },
            Disturbance::Latency(Some(_)) => "latency",
            Disturbance::Latency(None) => "latency-off",
            Disturbance::Deposed { .. } => "leader-deposed",
            Disturbance::Restored => "leader-restored",
        }
    }
}

/// The controller-specific disturbances of a seed, drawn from it beside its [`Scenario`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerPlan {
    /// Orphans created before the informers start (the first reconciles must remove them).
    pub initial: Vec<Disturbance>,
    /// Disturbances, each after the scenario's step at that index.
    pub steps: Vec<(usize, Disturbance)>,
}

/// Mixed into the seed so the plan's draws are not the scenario's.
const PLAN_SALT: u64 = 0x636f_6e74_726f_6c6c;

/// The chance that a disturbance follows a step.
const DISTURBANCE_RATE: f64 = 0.08;

impl ControllerPlan {
    /// The plan of `scenario`'s seed, over its steps.
    pub fn of(scenario: &Scenario) -> Self {
        let mut rng = StdRng::seed_from_u64(scenario.seed ^ PLAN_SALT);
        let initial = (0..rng.random_range(0..=2))
            .map(|_| orphan(&mut rng))
            .collect();
        let mut steps = Vec::new();
        // A latency window is closed again this many steps later (or by the calm at the end).
        let mut latency_until: Option<usize> = None;
        for i in 0..scenario.steps.len() {
            if latency_until == Some(i) {
                latency_until = None;
                steps.push((i, Disturbance::Latency(None)));
                continue;
            }
            if !rng.random_bool(DISTURBANCE_RATE) {
                continue;
            }
            let pick = rng.random_range(0..usize::MAX / 2);
            let disturbance = match rng.random_range(0..100) {
                0..18 => Disturbance::DriftData { pick },
                18..30 => Disturbance::DriftOwner { pick },
                30..46 => Disturbance::DeleteChild { pick },
                46..60 => orphan(&mut rng),
                60..72 => Disturbance::Extra { pick },
                72..94 => Disturbance::FailWrites {
                    verb: match rng.random_range(0..3) {
                        0 => WriteVerb::Create,
                        1 => WriteVerb::Update,
                        _ => WriteVerb::Delete,
                    },
                    times: rng.random_range(1..=4),
                    failure: match rng.random_range(0..4) {
                        0 => WriteFailure::Internal,
                        1 => WriteFailure::Unavailable,
                        2 => WriteFailure::TooManyRequests,
                        _ => WriteFailure::Conflict,
                    },
                },
                _ if latency_until.is_none() => {
                    latency_until = Some(i + rng.random_range(5..40));
                    Disturbance::Latency(Some(rng.random_range(1..=15)))
                }
                _ => Disturbance::DriftData { pick },
            };
            steps.push((i, disturbance));
        }
        ControllerPlan { initial, steps }
    }

    /// How many disturbances the plan holds.
    pub fn len(&self) -> usize {
        self.initial.len() + self.steps.len()
    }

    /// Whether the plan holds no disturbance.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn orphan(rng: &mut StdRng) -> Disturbance {
    Disturbance::Orphan {
        namespace: rng.random_range(0..NAMESPACES.len()),
        name: rng.random_range(0..NAMES_PER_NAMESPACE),
    }
}

/// The child `pod` wants: `<pod>-info` with its node, owned by it.
pub fn desired_child(pod: &Pod) -> ConfigMap {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let node = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default();
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(child_name(&name)),
            namespace: pod.metadata.namespace.clone(),
            owner_references: Some(vec![owner_reference(
                &name,
                pod.metadata.uid.as_deref().unwrap_or_default(),
            )]),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([("node".to_owned(), node)])),
        ..ConfigMap::default()
    }
}

fn owner_reference(pod: &str, uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: "v1".into(),
        kind: "Pod".into(),
        name: pod.into(),
        uid: uid.into(),
        controller: Some(true),
        ..OwnerReference::default()
    }
}

/// Whether `have` is what `want` asks for: the same data and the same owner references.
fn fits(have: &ConfigMap, want: &ConfigMap) -> bool {
    have.data == want.data && have.metadata.owner_references == want.metadata.owner_references
}

/// `namespace/name` of an object.
pub(crate) fn key_of<K: Resource>(object: &K) -> String {
    let meta = object.meta();
    format!(
        "{}/{}",
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default()
    )
}

fn rv_of<K: Resource>(object: &K) -> u64 {
    crate::journal::revision_of(object.meta().resource_version.as_deref())
}

/// The keys of the pods a ConfigMap belongs to, for `owns`.
///
/// [`owner_keys`] finds the owners the pod cache has by the UIDs of the owner references. It
/// cannot map a child whose owner is gone from the cache — an orphan, or a child whose create
/// the ConfigMap informer reports after the pod's deletion was reconciled — and those would
/// never be reconciled again. So the keys the owner references name (of kind `Pod`) and the
/// pod a `<pod>-info` name stands for are woken too: their reconcile finds the pod gone and
/// removes the child.
pub(crate) fn owners_of(pods: &Lister<Pod>, child: &ConfigMap) -> Vec<String> {
    let mut keys = owner_keys(pods, child);
    let namespace = child.metadata.namespace.as_deref().unwrap_or_default();
    let named = child
        .metadata
        .owner_references
        .iter()
        .flatten()
        .filter(|r| r.kind == "Pod")
        .map(|r| r.name.as_str())
        .chain(
            child
                .metadata
                .name
                .as_deref()
                .and_then(|n| n.strip_suffix("-info")),
        );
    for pod in named {
        let key = format!("{namespace}/{pod}");
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    keys
}

/// What a run counts, shared by the reconciles, the error policy and the checks.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    pub(crate) reconciles: AtomicU64,
    pub(crate) retried: AtomicU64,
    /// The most failures of one key in a row (its backoff grows with each).
    longest_streak: AtomicU64,
    creates: AtomicU64,
    replaces: AtomicU64,
    deletes: AtomicU64,
    /// Retried errors by kind (`409 Conflict`, `500 InternalError`, …).
    errors: Mutex<BTreeMap<String, u64>>,
    /// The keys being reconciled now.
    pub(crate) in_flight: Mutex<HashSet<Arc<str>>>,
    /// Broken invariants, as found.
    pub(crate) violations: Mutex<Vec<String>>,
}

impl Tally {
    fn violation(&self, problem: String) {
        self.violations.lock().push(problem);
    }

    /// Marks `key` in flight; records a violation if it already was.
    fn enter(&self, key: &Arc<str>) -> InFlight<'_> {
        let owned = self.in_flight.lock().insert(Arc::clone(key));
        if !owned {
            self.violation(format!("two reconciles of {key} at once"));
        }
        InFlight {
            tally: self,
            key: Arc::clone(key),
            owned,
        }
    }

    pub(crate) fn writes(&self) -> u64 {
        self.creates.load(Ordering::SeqCst)
            + self.replaces.load(Ordering::SeqCst)
            + self.deletes.load(Ordering::SeqCst)
    }
}

/// A key in flight, for as long as its reconcile runs (also when it is cancelled).
struct InFlight<'a> {
    tally: &'a Tally,
    key: Arc<str>,
    owned: bool,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if self.owned {
            self.tally.in_flight.lock().remove(&self.key);
        }
    }
}

/// What reconcile reads: the client, the caches, the queue (for its retry counts), and the
/// tally it records into.
pub(crate) struct Ctx {
    pub(crate) client: kube::Client,
    pub(crate) queue: WorkQueue<Arc<str>>,
    pub(crate) pods: Arc<SharedIndexInformer<Pod>>,
    pub(crate) config_maps: Arc<SharedIndexInformer<ConfigMap>>,
    pub(crate) tally: Arc<Tally>,
}

/// The reconcile: `ns/p`'s child is `ns/p-info`, with its node, owned by its current UID; any
/// other ConfigMap that belongs to `ns/p` goes, and all of them go once the pod is gone.
pub(crate) async fn reconcile(request: Request<Pod>, ctx: Arc<Ctx>) -> Result<Action, kube::Error> {
    let tally = &*ctx.tally;
    let _in_flight = tally.enter(&request.key);
    if !(ctx.pods.has_synced() && ctx.config_maps.has_synced()) {
        tally.violation(format!(
            "reconcile of {} before every cache synced (pods: {}, config maps: {})",
            request.key,
            ctx.pods.has_synced(),
            ctx.config_maps.has_synced()
        ));
    }
    tally.reconciles.fetch_add(1, Ordering::SeqCst);
    let Some((namespace, name)) = request.key.split_once('/') else {
        return Ok(Action::await_change());
    };
    let uid = match &request.target {
        Target::Live(pod) => pod.metadata.uid.clone(),
        Target::Deleted { last_known } => last_known
            .as_ref()
            .and_then(|p| p.metadata.uid.clone())
            .or_else(|| request.owner_uid.as_deref().map(str::to_owned)),
    };
    // Everything that belongs to the key, by name: its `-info` child, the ConfigMaps whose
    // owner reference names it, and those owned by its UID.
    let cache = ctx.config_maps.lister();
    let info = child_name(name);
    let mut related: BTreeMap<String, Arc<ConfigMap>> = BTreeMap::new();
    let mut relate = |cm: Arc<ConfigMap>| {
        if cm.metadata.namespace.as_deref() == Some(namespace)
            && let Some(n) = cm.metadata.name.clone()
        {
            related.insert(n, cm);
        }
    };
    if let Some(cm) = cache.get(&format!("{namespace}/{info}")) {
        relate(cm);
    }
    for cm in cache
        .by_index(OWNER_POD_INDEX, &request.key)
        .unwrap_or_default()
    {
        relate(cm);
    }
    if let Some(uid) = &uid {
        for cm in cache.by_index(OWNER_UID_INDEX, uid).unwrap_or_default() {
            relate(cm);
        }
    }
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), namespace);
    let mut wrote = false;
    if let Target::Live(pod) = &request.target {
        let want = desired_child(pod);
        match related.remove(&info) {
            None => {
                // A child the cache does not have yet is a 409 AlreadyExists: retried.
                api.create(&PostParams::default(), &want).await?;
                tally.creates.fetch_add(1, Ordering::SeqCst);
                wrote = true;
            }
            Some(have) if !fits(&have, &want) => {
                // Optimistic concurrency: a stale cache is a 409, retried with backoff.
                let mut repaired = want;
                repaired.metadata.resource_version = have.metadata.resource_version.clone();
                api.replace(&info, &PostParams::default(), &repaired)
                    .await?;
                tally.replaces.fetch_add(1, Ordering::SeqCst);
                wrote = true;
            }
            Some(_) => {}
        }
    }
    for (name, cm) in related {
        // Exactly the object the cache showed: a newer one under that name is a 409.
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: cm.metadata.uid.clone(),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match api.delete(&name, &params).await {
            Ok(_) => {
                tally.deletes.fetch_add(1, Ordering::SeqCst);
                wrote = true;
            }
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    if wrote {
        Ok(Action::requeue(VERIFY_AFTER))
    } else {
        Ok(Action::await_change())
    }
}

/// Every error is retried through the rate limiter, and counted by kind.
pub(crate) fn error_policy(request: &Request<Pod>, error: &kube::Error, ctx: &Arc<Ctx>) -> Action {
    let kind = match error {
        kube::Error::Api(status) => format!("{} {}", status.code, status.reason),
        _ => "transport".to_owned(),
    };
    // The failures counted since the key's last success, this one included.
    let streak = ctx.queue.num_requeues(&request.key) as u64 + 1;
    ctx.tally.longest_streak.fetch_max(streak, Ordering::SeqCst);
    ctx.tally.retried.fetch_add(1, Ordering::SeqCst);
    *ctx.tally.errors.lock().entry(kind).or_default() += 1;
    Action::backoff()
}

/// The controller's queue: per-key exponential backoff from [`RETRY_BASE`] capped at
/// [`RETRY_CAP`], and an overall bucket of [`RETRY_QPS`] (the longer of the two).
pub(crate) fn queue() -> WorkQueue<Arc<str>> {
    WorkQueue::builder()
        .name("chaos-controller")
        .rate_limiter(MaxOfRateLimiter::new(vec![
            Box::new(ItemExponentialFailureRateLimiter::new(
                RETRY_BASE, RETRY_CAP,
            )),
            Box::new(BucketRateLimiter::new(RETRY_QPS, RETRY_BURST)),
        ]))
        .build()
}

pub(crate) fn owner_pod_index_func() -> informer_store::IndexFunc<ConfigMap> {
    index_func(|cm: &ConfigMap| {
        let namespace = cm.metadata.namespace.as_deref().unwrap_or_default();
        Ok(cm
            .metadata
            .owner_references
            .iter()
            .flatten()
            .filter(|r| r.kind == "Pod")
            .map(|r| format!("{namespace}/{}", r.name))
            .collect::<IndexValues<'_>>())
    })
}

/// An informer over HTTP with the chaos stack's reflector settings.
fn informer<K>(
    lister_watcher: Recording<KubeListerWatcher<K>>,
    scenario: &Scenario,
    indexers: Indexers<K>,
) -> SharedIndexInformer<K>
where
    K: Resource + Clone + DeserializeOwned + fmt::Debug + Send + Sync + 'static,
{
    let builder = SharedIndexInformer::builder(lister_watcher, KubeIdentity).cache(Arc::new(
        ThreadSafeStore::with_indexers(key_func::<K>(), indexers),
    ));
    crate::stack::configure(
        builder,
        Duration::from_secs(scenario.server.min_watch_timeout_secs),
        scenario.server.streaming_list,
        scenario.server.relist_by_page,
    )
    .build()
}

/// The controller's two informers and their tasks.
struct Informers {
    pods: Arc<SharedIndexInformer<Pod>>,
    config_maps: Arc<SharedIndexInformer<ConfigMap>>,
    pod_log: Arc<CallLog>,
    config_map_log: Arc<CallLog>,
    /// Clones of the two lister-watchers: the encodings they read.
    pod_read: KubeListerWatcher<Pod>,
    config_map_read: KubeListerWatcher<ConfigMap>,
    stop: CancellationToken,
    tasks: Vec<JoinHandle<Result<(), InformerError>>>,
}

impl Informers {
    /// The pods (with the `uid` index) and the ConfigMaps (with the `owner-uid` and
    /// `owner-pod` indexes), not started.
    fn new(client: &kube::Client, scenario: &Scenario) -> Self {
        let mut pod_read = KubeListerWatcher::new(Api::<Pod>::all(client.clone()));
        let mut config_map_read = KubeListerWatcher::new(Api::<ConfigMap>::all(client.clone()));
        if scenario.server.json_only {
            pod_read = pod_read.json_only();
            config_map_read = config_map_read.json_only();
        }
        let pod_lw = Recording::new(pod_read.clone());
        let config_map_lw = Recording::new(config_map_read.clone());
        let (pod_log, config_map_log) = (pod_lw.log(), config_map_lw.log());
        let pods = informer(
            pod_lw,
            scenario,
            indexers([
                (NAMESPACE_INDEX, namespace_index_func::<Pod>()),
                (UID_INDEX, uid_index_func::<Pod>()),
            ]),
        );
        let config_maps = informer(
            config_map_lw,
            scenario,
            indexers([
                (NAMESPACE_INDEX, namespace_index_func::<ConfigMap>()),
                (OWNER_UID_INDEX, owner_uid_index_func::<ConfigMap>()),
                (OWNER_POD_INDEX, owner_pod_index_func()),
            ]),
        );
        Self {
            pods: Arc::new(pods),
            config_maps: Arc::new(config_maps),
            pod_log,
            config_map_log,
            pod_read,
            config_map_read,
            stop: CancellationToken::new(),
            tasks: Vec::new(),
        }
    }

    fn start(&mut self) {
        let (pods, config_maps) = (Arc::clone(&self.pods), Arc::clone(&self.config_maps));
        let (a, b) = (self.stop.clone(), self.stop.clone());
        self.tasks
            .push(tokio::spawn(async move { pods.run(a).await }));
        self.tasks
            .push(tokio::spawn(async move { config_maps.run(b).await }));
    }

    /// What differs between the caches and the server, object by object (key and
    /// resourceVersion).
    fn cache_differences(&self, pods: &[Pod], config_maps: &[ConfigMap]) -> Vec<String> {
        let mut problems = Vec::new();
        compare_cache("pod cache", pods, &self.pods.lister(), &mut problems);
        compare_cache(
            "config map cache",
            config_maps,
            &self.config_maps.lister(),
            &mut problems,
        );
        problems
    }

    /// Every relist of either informer followed a reason.
    fn check_relists(&self) -> Vec<String> {
        [
            ("pods", &self.pod_log),
            ("config maps", &self.config_map_log),
        ]
        .into_iter()
        .filter_map(|(name, log)| {
            check_relists(&log.calls())
                .err()
                .map(|e| format!("informer of {name}: {e}"))
        })
        .collect()
    }

    fn relists(&self) -> u64 {
        self.pod_log.lists().saturating_sub(1) + self.config_map_log.lists().saturating_sub(1)
    }

    /// Whether each informer read the encoding it was given (see [`check_encoding`]).
    fn check_encodings(&self, chosen: Encoding) -> Vec<String> {
        [
            ("pods", self.pod_read.encoding_counts()),
            ("config maps", self.config_map_read.encoding_counts()),
        ]
        .into_iter()
        .filter_map(|(name, counts)| check_encoding(name, chosen, counts))
        .collect()
    }

    /// The responses both informers read, by encoding, together.
    fn encoding_counts(&self) -> EncodingCounts {
        sum_counts([
            self.pod_read.encoding_counts(),
            self.config_map_read.encoding_counts(),
        ])
    }

    /// Stops both informers and waits (up to `bound`) for them.
    async fn shutdown(self, bound: Duration) -> Vec<String> {
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
        if !(self.pods.is_stopped() && self.config_maps.is_stopped()) {
            problems.push("an informer does not report itself stopped".to_owned());
        }
        problems
    }
}

fn compare_cache<K: Resource + 'static>(
    what: &str,
    server: &[K],
    cache: &Lister<K>,
    problems: &mut Vec<String>,
) {
    let expected: BTreeMap<String, u64> = server.iter().map(|o| (key_of(o), rv_of(o))).collect();
    let cached: BTreeMap<String, u64> = cache
        .list(&informer_store::Everything)
        .iter()
        .map(|o| (key_of(&**o), rv_of(&**o)))
        .collect();
    if expected != cached {
        let missing = expected
            .iter()
            .filter(|(k, rv)| cached.get(*k) != Some(rv))
            .count();
        let extra = cached.keys().filter(|k| !expected.contains_key(*k)).count();
        problems.push(format!(
            "{what}: {missing} objects missing or at another version, {extra} not on the server"
        ));
    }
}

/// What differs between the world on the server and the one the pods ask for: each pod's child
/// `<pod>-info` with its node and its current UID, and no other ConfigMap.
pub fn world_differences(pods: &[Pod], config_maps: &[ConfigMap]) -> Vec<String> {
    let wanted: BTreeMap<String, ConfigMap> = pods
        .iter()
        .map(|p| {
            let child = desired_child(p);
            (key_of(&child), child)
        })
        .collect();
    let uids: HashSet<&str> = pods
        .iter()
        .filter_map(|p| p.metadata.uid.as_deref())
        .collect();
    let have: BTreeMap<String, &ConfigMap> = config_maps.iter().map(|c| (key_of(c), c)).collect();
    let mut problems = Vec::new();
    for (key, want) in &wanted {
        match have.get(key) {
            None => problems.push(format!("{key}: missing")),
            Some(cm) if !fits(cm, want) => problems.push(format!(
                "{key}: data {:?} owned by {:?}, expected data {:?} owned by {:?}",
                cm.data,
                owner_uids(cm),
                want.data,
                owner_uids(want)
            )),
            Some(_) => {}
        }
    }
    for (key, cm) in &have {
        if wanted.contains_key(key) {
            continue;
        }
        let owners = owner_uids(cm);
        let gone: Vec<&str> = owners
            .iter()
            .copied()
            .filter(|uid| !uids.contains(uid))
            .collect();
        if gone.is_empty() {
            problems.push(format!(
                "{key}: a second child of {owners:?}, or no pod's child"
            ));
        } else {
            problems.push(format!(
                "{key}: owned by pod UIDs that do not exist: {gone:?}"
            ));
        }
    }
    problems
}

fn owner_uids(cm: &ConfigMap) -> Vec<&str> {
    cm.metadata
        .owner_references
        .iter()
        .flatten()
        .map(|r| r.uid.as_str())
        .collect()
}

/// The server's pods and ConfigMaps.
pub(crate) fn server_world(server: &ApiServer) -> Result<(Vec<Pod>, Vec<ConfigMap>), String> {
    let (pods, _) = server
        .list::<Pod>(None)
        .map_err(|e| format!("listing the server's pods: {e}"))?;
    let (config_maps, _) = server
        .list::<ConfigMap>(None)
        .map_err(|e| format!("listing the server's config maps: {e}"))?;
    Ok((pods, config_maps))
}

/// The server's children (`-info` ConfigMaps), sorted by key.
fn children_on(server: &ApiServer) -> Vec<ConfigMap> {
    let mut children: Vec<ConfigMap> = server
        .list::<ConfigMap>(None)
        .map(|(c, _)| c)
        .unwrap_or_default()
        .into_iter()
        .filter(|c| {
            c.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.ends_with("-info"))
        })
        .collect();
    children.sort_by_key(key_of);
    children
}

/// Makes one disturbance happen; whether it fired (a pick may find nothing to disturb).
fn disturb(server: &ApiServer, disturbance: &Disturbance, ghost_uid: &str) -> Result<bool, String> {
    let failed = |e: informer_apiserver::Error| format!("{disturbance:?} failed: {e}");
    let pick_child = |pick: usize| {
        let children = children_on(server);
        (!children.is_empty()).then(|| children[pick % children.len()].clone())
    };
    match disturbance {
        Disturbance::DriftData { pick } => {
            let Some(child) = pick_child(*pick) else {
                return Ok(false);
            };
            server
                .patch::<ConfigMap>(
                    child.metadata.namespace.as_deref(),
                    child.metadata.name.as_deref().unwrap_or_default(),
                    &json!({"data": {"node": "drifted"}}),
                )
                .map_err(failed)?;
        }
        Disturbance::DriftOwner { pick } => {
            let Some(child) = pick_child(*pick) else {
                return Ok(false);
            };
            let name = child.metadata.name.as_deref().unwrap_or_default();
            let pod = name.strip_suffix("-info").unwrap_or(name);
            server
                .patch::<ConfigMap>(
                    child.metadata.namespace.as_deref(),
                    name,
                    &json!({"metadata": {"ownerReferences": [owner_reference(pod, ghost_uid)]}}),
                )
                .map_err(failed)?;
        }
        Disturbance::DeleteChild { pick } => {
            let Some(child) = pick_child(*pick) else {
                return Ok(false);
            };
            server
                .delete::<ConfigMap>(
                    child.metadata.namespace.as_deref(),
                    child.metadata.name.as_deref().unwrap_or_default(),
                )
                .map_err(failed)?;
        }
        Disturbance::Orphan { namespace, name } => {
            let namespace = NAMESPACES[namespace % NAMESPACES.len()];
            let free = (0..NAMES_PER_NAMESPACE)
                .map(|i| format!("pod-{}", (name + i) % NAMES_PER_NAMESPACE))
                .find(|pod| {
                    server.get::<Pod>(Some(namespace), pod).is_err()
                        && server
                            .get::<ConfigMap>(Some(namespace), &child_name(pod))
                            .is_err()
                });
            let Some(pod) = free else {
                return Ok(false);
            };
            let orphan = ConfigMap {
                metadata: ObjectMeta {
                    name: Some(child_name(&pod)),
                    namespace: Some(namespace.to_owned()),
                    owner_references: Some(vec![owner_reference(&pod, ghost_uid)]),
                    ..ObjectMeta::default()
                },
                data: Some(BTreeMap::from([("node".to_owned(), "nowhere".to_owned())])),
                ..ConfigMap::default()
            };
            server.create(&orphan).map_err(failed)?;
        }
        Disturbance::Extra { pick } => {
            let mut pods = server.list::<Pod>(None).map(|(p, _)| p).unwrap_or_default();
            if pods.is_empty() {
                return Ok(false);
            }
            pods.sort_by_key(key_of);
            let pod = &pods[pick % pods.len()];
            let name = pod.metadata.name.clone().unwrap_or_default();
            let mut extra = desired_child(pod);
            extra.metadata.name = Some(format!("{name}-extra"));
            if server
                .get::<ConfigMap>(pod.metadata.namespace.as_deref(), &format!("{name}-extra"))
                .is_ok()
            {
                return Ok(false);
            }
            server.create(&extra).map_err(failed)?;
        }
        Disturbance::FailWrites {
            verb,
            times,
            failure,
        } => {
            let verb = match verb {
                WriteVerb::Create => ServerVerb::Create,
                WriteVerb::Update => ServerVerb::Update,
                WriteVerb::Delete => ServerVerb::Delete,
            };
            let failure = match failure {
                WriteFailure::Internal => ServerFailure::internal("injected"),
                WriteFailure::Unavailable => ServerFailure::unavailable(),
                WriteFailure::TooManyRequests => ServerFailure::too_many_requests(0),
                WriteFailure::Conflict => ServerFailure::Status(StatusError::custom(
                    409,
                    "Conflict",
                    "the object has been modified; please apply your changes to the latest version and try again",
                )),
            };
            server.faults().fail_next(verb, *times, failure);
        }
        Disturbance::Latency(ms) => {
            server
                .faults()
                .set_latency(Duration::from_millis(ms.unwrap_or(0)));
        }
        Disturbance::Restored => return Ok(election::restore(server)),
        // It waits for the elector: see `disturb_elected`.
        Disturbance::Deposed { .. } => return Ok(false),
    }
    Ok(true)
}

/// [`disturb`], and a deposition: the Lease taken, the controller stepped down, then the orphan.
async fn disturb_elected(
    server: &ApiServer,
    elector: Option<&LeaderElector>,
    disturbance: &Disturbance,
    ghost_uid: &str,
) -> Result<bool, String> {
    match (disturbance, elector) {
        (Disturbance::Deposed { namespace, name }, Some(elector)) => {
            if !election::depose(server, elector).await? {
                return Ok(false);
            }
            let orphan = Disturbance::Orphan {
                namespace: *namespace,
                name: *name,
            };
            disturb(server, &orphan, ghost_uid)
        }
        _ => disturb(server, disturbance, ghost_uid),
    }
}

/// What a passing controller run did.
#[derive(Debug, Clone, Default)]
pub struct ControllerOutcome {
    /// The seed.
    pub seed: u64,
    /// Reconciles run.
    pub reconciles: u64,
    /// Reconciles that failed and were retried through the rate limiter.
    pub errors_retried: u64,
    /// The retried errors by kind (`409 Conflict`, `500 InternalError`, …).
    pub errors: BTreeMap<String, u64>,
    /// The most failures of one key in a row.
    pub longest_streak: u64,
    /// The controller's writes that succeeded: creates, replaces and deletes.
    pub writes: u64,
    /// Of which creates.
    pub creates: u64,
    /// Of which replaces (repairs).
    pub replaces: u64,
    /// Of which deletes.
    pub deletes: u64,
    /// Pod writes of the scenario (initial pods included).
    pub pod_writes: usize,
    /// Faults and disturbances fired, by kind.
    pub faults: BTreeMap<&'static str, u64>,
    /// Lists after the first, both informers together.
    pub relists: u64,
    /// Responses the informers read, by encoding, both together.
    pub responses: EncodingCounts,
    /// Pods on the server at the end (each with its one child).
    pub pods: usize,
    /// From the end of the churn and faults to a converged, quiet world.
    pub settled_in: Duration,
    /// The whole run.
    pub wall: Duration,
}

impl fmt::Display for ControllerOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "seed {} passed: {} pod writes, {} faults and disturbances, {} reconciles, {} errors \
             retried, {} writes, {} relists, {} protobuf and {} JSON responses, {} pods, settled \
             in {:.2?}, {:.2?} in all",
            self.seed,
            self.pod_writes,
            self.faults.values().sum::<u64>(),
            self.reconciles,
            self.errors_retried,
            self.writes,
            self.relists,
            self.responses.protobuf,
            self.responses.json,
            self.pods,
            self.settled_in,
            self.wall
        )
    }
}

/// Waits up to `bound` for the world on the server to converge, with both caches equal to the
/// server and the controller's queue idle (nothing queued or in flight); returns how long it
/// took, or what still differs.
async fn settle(
    server: &ApiServer,
    informers: &Informers,
    queue: &WorkQueue<Arc<str>>,
    bound: Duration,
) -> Result<Duration, Vec<String>> {
    let begun = Instant::now();
    loop {
        let mut problems = match server_world(server) {
            Ok((pods, config_maps)) => {
                let mut problems = world_differences(&pods, &config_maps);
                problems.extend(informers.cache_differences(&pods, &config_maps));
                problems
            }
            Err(e) => vec![e],
        };
        if problems.is_empty() && (!queue.is_empty() || queue.in_flight() > 0) {
            problems.push(format!(
                "the controller is busy: {} keys queued, {} in flight",
                queue.len(),
                queue.in_flight()
            ));
        }
        if problems.is_empty() {
            return Ok(begun.elapsed());
        }
        if begun.elapsed() > bound {
            return Err(problems);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// At most this many problems of one kind in a failure.
const SHOWN: usize = 12;

pub(crate) fn shown(mut problems: Vec<String>) -> Vec<String> {
    if problems.len() > SHOWN {
        let more = problems.len() - SHOWN;
        problems.truncate(SHOWN);
        problems.push(format!("… and {more} more"));
    }
    problems
}

/// Runs the controller scenario of `scenario` on the current runtime: starts the simulator,
/// the informers and the controller, applies the steps and the plan's disturbances, calms the
/// server, waits for the world to converge, then stops everything and checks the invariants.
/// The runtime's own tasks are checked by [`run_controller_seed`].
pub async fn run_controller(scenario: &Scenario) -> Result<ControllerOutcome, Failure> {
    let begun = Instant::now();
    let fail = |problems: Vec<String>| Failure::of(scenario, Suite::Controller, problems);
    let server = start_server(scenario).await.map_err(|e| fail(vec![e]))?;
    let outcome = drive(scenario, &server).await;
    server.shutdown().await;
    let mut outcome = outcome.map_err(fail)?;
    outcome.wall = begun.elapsed();
    Ok(outcome)
}

async fn drive(scenario: &Scenario, server: &ApiServer) -> Result<ControllerOutcome, Vec<String>> {
    let plan = ControllerPlan::of(scenario);
    let writes = WriteLog::default();
    let ghost = |n: usize| format!("ghost-{}-{n}", scenario.seed);
    let mut faults: BTreeMap<&'static str, u64> = BTreeMap::new();
    for op in &scenario.initial {
        apply(server, op, &writes).map_err(|e| vec![e])?;
    }
    for (n, disturbance) in plan.initial.iter().enumerate() {
        if disturb(server, disturbance, &ghost(n)).map_err(|e| vec![e])? {
            *faults.entry(disturbance.kind()).or_default() += 1;
        }
    }

    let client = client(server).map_err(|e| vec![e])?;
    let mut informers = Informers::new(&client, scenario);
    let tally = Arc::new(Tally::default());
    let queue = queue();
    let owners = informers.pods.lister();
    let mut controller = Controller::with_queue(Arc::clone(&informers.pods), queue.clone())
        .owns(Arc::clone(&informers.config_maps), move |cm: &ConfigMap| {
            owners_of(&owners, cm)
        })
        .concurrency(CONCURRENCY)
        .shutdown_timeout(SETTLE_BOUND);
    let election = ElectionPlan::of(scenario);
    let elector = match election.elected {
        true => Some(election::elector(&client).map_err(|e| vec![e])?),
        false => None,
    };
    if let Some(elector) = &elector {
        controller = controller.leader_election(elector.clone());
    }
    let mut steps = plan.steps.clone();
    steps.extend(election.steps);
    steps.sort_by_key(|(at, _)| *at);
    let ctx = Arc::new(Ctx {
        client,
        queue: queue.clone(),
        pods: Arc::clone(&informers.pods),
        config_maps: Arc::clone(&informers.config_maps),
        tally: Arc::clone(&tally),
    });
    informers.start();
    let stop = CancellationToken::new();
    let running = tokio::spawn(controller.run(stop.clone(), ctx, reconcile, error_policy));

    let mut problems = Vec::new();
    let mut disturbances = steps.iter().enumerate().peekable();
    'steps: for (i, step) in scenario.steps.iter().enumerate() {
        match step {
            Step::Op(op) => {
                if let Err(e) = apply(server, op, &writes) {
                    problems.push(e);
                    break 'steps;
                }
            }
            Step::Fault(fault) => {
                inject(server, fault);
                *faults.entry(fault.kind()).or_default() += 1;
            }
            Step::Pause(ms) => tokio::time::sleep(Duration::from_millis(*ms)).await,
        }
        while let Some((n, (_, disturbance))) = disturbances.next_if(|(_, (at, _))| *at <= i) {
            let ghost_uid = ghost(plan.initial.len() + n);
            match disturb_elected(server, elector.as_ref(), disturbance, &ghost_uid).await {
                Ok(true) => *faults.entry(disturbance.kind()).or_default() += 1,
                Ok(false) => {}
                Err(e) => {
                    problems.push(e);
                    break 'steps;
                }
            }
        }
        tokio::task::yield_now().await;
    }
    calm(server);
    server.faults().set_latency(Duration::ZERO);
    if election::usurped(server) && election::restore(server) {
        *faults.entry(Disturbance::Restored.kind()).or_default() += 1;
    }

    let mut settled_in = SETTLE_BOUND;
    if problems.is_empty() {
        match settle(server, &informers, &queue, SETTLE_BOUND).await {
            Ok(took) => settled_in = took,
            Err(differences) => {
                problems.push(format!(
                    "no convergence within {SETTLE_BOUND:?} after the churn and faults stopped:"
                ));
                problems.extend(shown(differences));
                let mut running: Vec<String> = tally
                    .in_flight
                    .lock()
                    .iter()
                    .map(|k| k.to_string())
                    .collect();
                running.sort();
                problems.push(format!(
                    "the controller's queue then: {queue:?}; reconciles running: {running:?}"
                ));
            }
        }
    }

    stop.cancel();
    match tokio::time::timeout(SETTLE_BOUND, running).await {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(e))) => problems.push(format!("the controller's run ended with an error: {e}")),
        Ok(Err(e)) => problems.push(format!("the controller's task failed: {e}")),
        Err(_) => problems.push(format!(
            "the controller did not stop within {SETTLE_BOUND:?}"
        )),
    }
    let running = tally.in_flight.lock().len();
    if queue.in_flight() > 0 || running > 0 {
        problems.push(format!(
            "reconciles still under way after the controller stopped: {} keys in flight in \
             the queue, {running} reconciles running",
            queue.in_flight()
        ));
    }
    // Converged and quiet means nothing more to do: the world is still what it should be.
    if settled_in < SETTLE_BOUND {
        match server_world(server) {
            Ok((pods, config_maps)) => {
                let moved = world_differences(&pods, &config_maps);
                if !moved.is_empty() {
                    problems.push("the world changed after it had converged:".to_owned());
                    problems.extend(shown(moved));
                }
            }
            Err(e) => problems.push(e),
        }
    }
    problems.extend(shown(tally.violations.lock().clone()));
    problems.extend(informers.check_relists());
    problems.extend(informers.check_encodings(scenario.server.encoding()));
    let relists = informers.relists();
    let responses = informers.encoding_counts();
    problems.extend(informers.shutdown(SETTLE_BOUND).await);

    if !problems.is_empty() {
        return Err(problems);
    }
    Ok(ControllerOutcome {
        seed: scenario.seed,
        reconciles: tally.reconciles.load(Ordering::SeqCst),
        errors_retried: tally.retried.load(Ordering::SeqCst),
        errors: tally.errors.lock().clone(),
        longest_streak: tally.longest_streak.load(Ordering::SeqCst),
        writes: tally.writes(),
        creates: tally.creates.load(Ordering::SeqCst),
        replaces: tally.replaces.load(Ordering::SeqCst),
        deletes: tally.deletes.load(Ordering::SeqCst),
        pod_writes: writes.len(),
        faults,
        relists,
        responses,
        pods: server.list::<Pod>(None).map_or(0, |(p, _)| p.len()),
        settled_in,
        wall: Duration::ZERO,
    })
}

/// Runs the controller scenario of `scenario` on a runtime of its own, then checks that the
/// runtime has no task left (the controller, the informers, the server and the client all
/// released theirs).
pub fn run_controller_seed(scenario: &Scenario) -> Result<ControllerOutcome, Failure> {
    on_a_runtime_of_its_own(scenario, Suite::Controller, run_controller(scenario))
}

/// The controller's figures over many seeds (see [`Summary`]).
#[derive(Debug, Default)]
pub struct ControllerTally {
    /// Reconciles, over all passing seeds.
    pub reconciles: u64,
    /// Reconciles that failed and were retried.
    pub errors_retried: u64,
    /// The retried errors by kind.
    pub errors: BTreeMap<String, u64>,
    /// The most failures of one key in a row, over all seeds.
    pub longest_streak: u64,
    /// The controller's writes.
    pub writes: u64,
    /// Of which creates.
    pub creates: u64,
    /// Replaces.
    pub replaces: u64,
    /// Deletes.
    pub deletes: u64,
    /// Relists, both informers together.
    pub relists: u64,
    /// The slowest convergence after the churn stopped.
    pub slowest_settle: Duration,
    /// The seed of the slowest convergence.
    pub slowest_seed: u64,
}

impl SeedSuite for ControllerTally {
    type Outcome = ControllerOutcome;

    const SUITE: Suite = Suite::Controller;

    const RUN_SEED: fn(&Scenario) -> Result<ControllerOutcome, Failure> = run_controller_seed;

    fn add(&mut self, outcome: ControllerOutcome) -> (BTreeMap<&'static str, u64>, EncodingCounts) {
        self.reconciles += outcome.reconciles;
        self.errors_retried += outcome.errors_retried;
        for (kind, n) in outcome.errors {
            *self.errors.entry(kind).or_default() += n;
        }
        self.longest_streak = self.longest_streak.max(outcome.longest_streak);
        self.writes += outcome.writes;
        self.creates += outcome.creates;
        self.replaces += outcome.replaces;
        self.deletes += outcome.deletes;
        self.relists += outcome.relists;
        if outcome.settled_in >= self.slowest_settle {
            self.slowest_settle = outcome.settled_in;
            self.slowest_seed = outcome.seed;
        }
        (outcome.faults, outcome.responses)
    }

    fn write_lines(&self, _passed: usize, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "reconciles: {}, errors retried: {}, writes: {} ({} creates, {} replaces, {} deletes), relists: {}",
            self.reconciles,
            self.errors_retried,
            self.writes,
            self.creates,
            self.replaces,
            self.deletes,
            self.relists
        )?;
        writeln!(
            f,
            "slowest settle: {:.2?} (seed {}), longest failure streak of one key: {}",
            self.slowest_settle, self.slowest_seed, self.longest_streak
        )?;
        writeln!(f, "retried errors by kind:")?;
        for (kind, n) in &self.errors {
            writeln!(f, "  {kind:<28} {n}")?;
        }
        Ok(())
    }
}

/// Runs the controller scenarios of `scenarios` on `jobs` threads, each seed on a runtime of
/// its own; `progress` is told of every result as it comes. Once all have finished, no job may
/// be left on the delivery pool.
pub fn run_controller_seeds(
    scenarios: Vec<Scenario>,
    jobs: usize,
    progress: impl Fn(&Result<ControllerOutcome, Failure>) + Sync,
) -> Summary<ControllerTally> {
    run_suite(scenarios, jobs, progress)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(namespace: &str, name: &str, uid: &str, node: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": namespace, "uid": uid},
            "spec": {"nodeName": node, "containers": []},
        }))
        .expect("a pod")
    }

    #[test]
    fn a_seed_always_gives_the_same_plan() {
        let (a, b) = (Scenario::from_seed(11), Scenario::from_seed(12));
        assert_eq!(ControllerPlan::of(&a), ControllerPlan::of(&a));
        assert_ne!(ControllerPlan::of(&a), ControllerPlan::of(&b));
    }

    #[test]
    fn plans_hold_every_kind_of_disturbance_and_close_their_latency_windows() {
        let mut kinds = HashSet::new();
        for seed in 0..100 {
            let scenario = Scenario::from_seed(seed);
            let plan = ControllerPlan::of(&scenario);
            let mut open = false;
            for (at, d) in &plan.steps {
                assert!(*at < scenario.steps.len());
                match d {
                    Disturbance::Latency(Some(_)) => {
                        assert!(!open, "one latency window at a time");
                        open = true;
                    }
                    Disturbance::Latency(None) => {
                        assert!(open);
                        open = false;
                    }
                    _ => {}
                }
                kinds.insert(std::mem::discriminant(d));
            }
            assert!(
                plan.initial
                    .iter()
                    .all(|d| matches!(d, Disturbance::Orphan { .. }))
            );
        }
        assert_eq!(
            kinds.len(),
            7,
            "drift ×2, delete, orphan, extra, fail, latency"
        );
    }

    #[test]
    fn a_converged_world_has_no_differences() {
        let pods = [pod("a", "p", "u1", "node-1"), pod("b", "q", "u2", "node-2")];
        let children: Vec<_> = pods.iter().map(desired_child).collect();
        assert_eq!(world_differences(&pods, &children), Vec::<String>::new());
    }

    /// The world check has teeth: a missing, drifted, stale-owner, second and orphan child are
    /// each found.
    #[test]
    fn the_world_check_finds_every_kind_of_difference() {
        let pods = [pod("a", "p", "u1", "node-1"), pod("a", "q", "u2", "node-2")];
        let p = desired_child(&pods[0]);
        let mut drifted = desired_child(&pods[1]);
        drifted.data = Some(BTreeMap::from([("node".into(), "drifted".into())]));
        let found = world_differences(&pods, &[p.clone(), drifted]);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].starts_with("a/q-info: data"), "{found:?}");

        let found = world_differences(&pods, std::slice::from_ref(&p));
        assert_eq!(found, ["a/q-info: missing"]);

        // The pod q was recreated: its child still names the old UID.
        let old_q = pod("a", "q", "u0", "node-2");
        let found = world_differences(&pods, &[p.clone(), desired_child(&old_q)]);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("u0"), "{found:?}");

        let mut extra = desired_child(&pods[0]);
        extra.metadata.name = Some("p-extra".into());
        let q = desired_child(&pods[1]);
        let found = world_differences(&pods, &[p.clone(), q.clone(), extra]);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].starts_with("a/p-extra: a second child"),
            "{found:?}"
        );

        let ghost = desired_child(&pod("a", "r", "u9", "node-3"));
        let found = world_differences(&pods, &[p, q, ghost]);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("do not exist"), "{found:?}");
    }

    #[test]
    fn owners_are_found_by_uid_and_by_name() {
        let pods = Arc::new(informer_store::ThreadSafeStore::with_indexers(
            key_func::<Pod>(),
            indexers([(UID_INDEX, uid_index_func::<Pod>())]),
        ));
        use informer_store::ReflectorStore;
        pods.add(Arc::new(pod("a", "p", "u1", "node-1"))).unwrap();
        let lister = Lister::new(pods);
        let child = desired_child(&pod("a", "p", "u1", "node-1"));
        assert_eq!(owners_of(&lister, &child), ["a/p"]);
        // An orphan: its owner UID is unknown, its name and its reference still name a pod.
        let orphan = desired_child(&pod("a", "gone", "u7", "node-1"));
        assert_eq!(owners_of(&lister, &orphan), ["a/gone"]);
        let mut moved = desired_child(&pod("a", "p", "u1", "node-1"));
        moved.metadata.name = Some("x-info".into());
        assert_eq!(owners_of(&lister, &moved), ["a/p", "a/x"]);
    }
}
