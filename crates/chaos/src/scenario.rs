//! Seeded scenarios: the churn, the faults and the server's settings of one run (the
//! informers' too: streaming list, relist by page, encoding), all derived from a `u64` seed.
//!
//! Every random choice is made here, ahead of the run, from one [`StdRng`]: which object each
//! operation touches, which fault fires after which operation, how long a fault window lasts
//! (counted in operations, never in wall-clock time). Replaying a seed replays the same
//! schedule; only the interleaving with the network can differ.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;

use informer_apiserver::{ExpiredWatch, SlowWatcher};
use informer_kube::Encoding;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The namespaces objects live in.
pub const NAMESPACES: [&str; 3] = ["alpha", "beta", "gamma"];
/// How many nodes pods are spread over (`node-0` .. `node-5`).
pub const NODES: u32 = 6;
/// The label selector of the second informer: only these pods are in its cache.
pub const SELECTOR: &str = "tier=gold";
/// How many pod names a scenario uses in each namespace (`pod-0` .. `pod-29`): names come back
/// after a delete, with new UIDs.
pub const NAMES_PER_NAMESPACE: usize = 30;

/// One write to the API server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Creates a pod (its name is free at this point of the schedule).
    Create {
        /// The pod's key.
        key: PodKey,
        /// The node it is scheduled on.
        node: u32,
        /// Whether it carries `tier=gold` (matches [`SELECTOR`]).
        gold: bool,
    },
    /// Moves a pod to another node (a `spec` change).
    Move {
        /// The pod's key.
        key: PodKey,
        /// The new node.
        node: u32,
    },
    /// Changes an annotation (a metadata-only change).
    Annotate {
        /// The pod's key.
        key: PodKey,
        /// The annotation's new value.
        value: u64,
    },
    /// Sets or clears `tier=gold`: the pod enters or leaves the selector's set.
    Relabel {
        /// The pod's key.
        key: PodKey,
        /// Whether it is gold afterwards.
        gold: bool,
    },
    /// Deletes a pod at once (no grace period, finalizers ignored).
    Delete {
        /// The pod's key.
        key: PodKey,
    },
    /// Deletes a (scheduled) pod gracefully: it stays, marked with a `deletionTimestamp`,
    /// until [`Op::FinishDeletion`] (the grace period is longer than any run).
    Terminate {
        /// The pod's key.
        key: PodKey,
        /// The grace period asked for.
        grace_seconds: u32,
    },
    /// Ends a terminating pod's grace period, as its kubelet would: it is removed, or, with a
    /// finalizer, stays marked until the finalizer goes.
    FinishDeletion {
        /// The pod's key.
        key: PodKey,
    },
    /// Adds a finalizer to a pod that is not terminating.
    AddFinalizer {
        /// The pod's key.
        key: PodKey,
    },
    /// Removes the finalizer: a pod whose deletion was finished is removed by it.
    RemoveFinalizer {
        /// The pod's key.
        key: PodKey,
    },
}

/// A pod's namespace and name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PodKey {
    /// The namespace.
    pub namespace: String,
    /// The name.
    pub name: String,
}

impl fmt::Display for PodKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// A failure returned instead of serving a list or a watch request (`fail_next`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestFailure {
    /// `429` with a JSON Status and `Retry-After`.
    TooManyRequests {
        /// Seconds.
        retry_after: u32,
    },
    /// Plain-text `429` from priority and fairness.
    Throttled {
        /// Seconds.
        retry_after: u32,
    },
    /// `500 InternalError`.
    Internal,
    /// `503 ServiceUnavailable`.
    Unavailable,
}

/// The request a [`RequestFailure`] hits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestVerb {
    /// A list.
    List,
    /// A watch.
    Watch,
}

/// An `ERROR` event sent on every open watch, which then ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchError {
    /// 410 `Expired`.
    Expired,
    /// 410 `Gone`.
    Gone,
    /// 500 `InternalError`.
    Internal,
    /// 429 `TooManyRequests` with `retryAfterSeconds`.
    TooManyRequests {
        /// Seconds.
        retry_after: u32,
    },
    /// 504 with cause `ResourceVersionTooLarge`.
    TooLarge,
    /// An `ERROR` whose object is not a Status (`{}`).
    NotAStatus,
}

/// One fault, as the simulator's fault handle injects it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Abort every watch connection.
    DropWatches,
    /// Write half an event, then abort every watch connection.
    DropMidEvent,
    /// End every watch cleanly.
    CloseWatches,
    /// Write half an event, then end every watch cleanly.
    TornEvent,
    /// A line that is not JSON on every watch; the stream goes on.
    GarbageLine,
    /// Re-send each watch's last event.
    DuplicateEvent,
    /// An `ERROR` event on every watch.
    WatchError(WatchError),
    /// Fail the next `times` requests of `verb`.
    FailNext {
        /// Which requests.
        verb: RequestVerb,
        /// How many.
        times: usize,
        /// With what.
        failure: RequestFailure,
    },
    /// Compact the history up to the head (older versions are 410), then optionally drop every
    /// watch so that they resume from a compacted version.
    Compact {
        /// Also drop every watch.
        drop_watches: bool,
    },
    /// Restart: every watch aborted, the history lost.
    Restart,
    /// Periodic bookmarks on or off.
    Bookmarks(bool),
    /// Slow every watch stream down (`Some((chunk_bytes, delay_ms))`) or restore it.
    SlowStream(Option<(usize, u64)>),
}

impl Fault {
    /// A short name for the summary's faults-by-kind table.
    pub fn kind(&self) -> &'static str {
        match self {
            Fault::DropWatches => "drop-watches",
            Fault::DropMidEvent => "drop-mid-event",
            Fault::CloseWatches => "close-watches",
            Fault::TornEvent => "torn-event",
            Fault::GarbageLine => "garbage-line",
            Fault::DuplicateEvent => "duplicate-event",
            Fault::WatchError(WatchError::Expired) => "error-410-expired",
            Fault::WatchError(WatchError::Gone) => "error-410-gone",
            Fault::WatchError(WatchError::Internal) => "error-500",
            Fault::WatchError(WatchError::TooManyRequests { .. }) => "error-429",
            Fault::WatchError(WatchError::TooLarge) => "error-504-too-large",
            Fault::WatchError(WatchError::NotAStatus) => "error-not-a-status",
            Fault::FailNext { verb, failure, .. } => match (verb, failure) {
                (RequestVerb::List, RequestFailure::TooManyRequests { .. }) => "fail-list-429",
                (RequestVerb::List, RequestFailure::Throttled { .. }) => "fail-list-429-text",
                (RequestVerb::List, RequestFailure::Internal) => "fail-list-500",
                (RequestVerb::List, RequestFailure::Unavailable) => "fail-list-503",
                (RequestVerb::Watch, RequestFailure::TooManyRequests { .. }) => "fail-watch-429",
                (RequestVerb::Watch, RequestFailure::Throttled { .. }) => "fail-watch-429-text",
                (RequestVerb::Watch, RequestFailure::Internal) => "fail-watch-500",
                (RequestVerb::Watch, RequestFailure::Unavailable) => "fail-watch-503",
            },
            Fault::Compact { drop_watches: true } => "compact-and-drop",
            Fault::Compact {
                drop_watches: false,
            } => "compact",
            Fault::Restart => "restart",
            Fault::Bookmarks(false) => "bookmarks-off",
            Fault::Bookmarks(true) => "bookmarks-on",
            Fault::SlowStream(Some(_)) => "slow-stream",
            Fault::SlowStream(None) => "slow-stream-off",
        }
    }
}

/// One step of a scenario.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// A write.
    Op(Op),
    /// A fault.
    Fault(Fault),
    /// Let the network run for this many milliseconds before the next step.
    Pause(u64),
}

/// The simulator's settings for a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerSettings {
    /// `Config::history_size`: small values make resumes expire on their own.
    pub history_size: usize,
    /// `Config::watch_buffer`: small values close watchers that fall behind (with slow streams),
    /// or make the server wait for them (`slow_watcher`).
    pub watch_buffer: usize,
    /// `Config::slow_watcher`: what a watcher that falls `watch_buffer` behind gets. Drawn from
    /// a generator of its own.
    pub slow_watcher: SlowWatcher,
    /// How a watch from a compacted version fails.
    pub expired_watch: ExpiredWatch,
    /// The reflectors' minimum watch timeout in seconds (watches end cleanly after 1–2×).
    pub min_watch_timeout_secs: u64,
    /// The reflectors get their initial state as a streaming list (`sendInitialEvents`).
    pub streaming_list: bool,
    /// The reflectors list in pages of [`SMALL_PAGE`] and apply each page of a relist as it
    /// arrives (`with_relist_by_page`). Drawn from a generator of its own, so the rest of a
    /// seed's scenario is what it was before the setting existed.
    pub relist_by_page: bool,
    /// The simulator writes opaque resource versions (`x` and hex), which the stack must pass
    /// back without reading. Drawn from a generator of its own, as `relist_by_page` is.
    pub opaque_resource_versions: bool,
    /// How long after its commit the simulator's watch cache receives a change, in
    /// milliseconds (0: at once), so that clients see their own writes late. Drawn from a
    /// generator of its own.
    pub cache_delay_ms: u64,
    /// The lister-watchers ask for JSON only (`KubeListerWatcher::json_only`) instead of
    /// protobuf with JSON as the fallback: one seed in four, those with `seed % 4 == 3`, not
    /// drawn, so the rest of a seed's scenario is what it was before the setting existed.
    pub json_only: bool,
}

/// The page size of the reflectors that relist by page: small, so that relists of a few dozen
/// pods come in several pages.
pub const SMALL_PAGE: u32 = 7;

/// A whole run, derived from a seed: the initial objects, the steps, the server's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scenario {
    /// The seed everything was drawn from.
    pub seed: u64,
    /// Objects created before the informers start.
    pub initial: Vec<Op>,
    /// Writes, faults and pauses, in order.
    pub steps: Vec<Step>,
    /// The simulator's settings.
    pub server: ServerSettings,
}

/// The default number of steps of a scenario.
pub const DEFAULT_STEPS: usize = 300;

impl ServerSettings {
    /// The optional settings this seed's server runs with, by name (for the summaries).
    pub fn names(&self) -> Vec<&'static str> {
        let mut names = Vec::new();
        let mut name = |on: bool, what: &'static str| {
            if on {
                names.push(what);
            }
        };
        name(self.history_size < 10_000, "short history");
        name(self.watch_buffer < 4096, "small watch buffer");
        // Only a small buffer makes the choice matter.
        name(
            self.watch_buffer < 4096 && self.slow_watcher == SlowWatcher::Block,
            "slow watchers waited for",
        );
        name(self.streaming_list, "streaming list");
        name(self.relist_by_page, "relist by page");
        name(self.opaque_resource_versions, "opaque resource versions");
        name(self.cache_delay_ms > 0, "late watch cache");
        names
    }

    /// The encoding the lister-watchers read: JSON on a JSON-only seed, else protobuf (the
    /// simulator serves pods and ConfigMaps in it).
    pub fn encoding(&self) -> Encoding {
        if self.json_only {
            Encoding::Json
        } else {
            Encoding::Protobuf
        }
    }
}

/// How many of `scenarios` read each encoding (`json`, `protobuf`; both named, at 0 too).
pub fn encodings_tally(scenarios: &[Scenario]) -> BTreeMap<&'static str, usize> {
    let mut tally: BTreeMap<&'static str, usize> = [Encoding::Json, Encoding::Protobuf]
        .into_iter()
        .map(|e| (e.as_str(), 0))
        .collect();
    for scenario in scenarios {
        *tally
            .entry(scenario.server.encoding().as_str())
            .or_default() += 1;
    }
    tally
}

/// How many of `scenarios` run with each optional server setting.
pub fn server_settings_tally(scenarios: &[Scenario]) -> BTreeMap<&'static str, usize> {
    let mut tally = BTreeMap::new();
    for scenario in scenarios {
        for name in scenario.server.names() {
            *tally.entry(name).or_default() += 1;
        }
    }
    tally
}

impl Scenario {
    /// The scenario of `seed`, with [`DEFAULT_STEPS`] steps.
    pub fn from_seed(seed: u64) -> Self {
        Self::with_steps(seed, DEFAULT_STEPS)
    }

    /// The scenario of `seed` with `steps` steps (writes, faults and pauses together).
    pub fn with_steps(seed: u64, steps: usize) -> Self {
        let mut generator = Generator::new(seed, NAMES_PER_NAMESPACE);
        let server = ServerSettings {
            history_size: if generator.rng.random_bool(0.3) {
                generator.rng.random_range(60..200)
            } else {
                10_000
            },
            watch_buffer: if generator.rng.random_bool(0.3) {
                generator.rng.random_range(8..64)
            } else {
                4096
            },
            expired_watch: match generator.rng.random_range(0..4) {
                0 => ExpiredWatch::ErrorEventGone,
                1 => ExpiredWatch::Http410,
                _ => ExpiredWatch::ErrorEvent,
            },
            min_watch_timeout_secs: generator.rng.random_range(1..=4),
            streaming_list: generator.rng.random_bool(0.5),
            relist_by_page: StdRng::seed_from_u64(seed ^ 0x7e1a_57ba_9e00_0001).random_bool(0.5),
            opaque_resource_versions: StdRng::seed_from_u64(seed ^ 0x0a9e_0e55_7e75_0002)
                .random_bool(0.25),
            slow_watcher: if StdRng::seed_from_u64(seed ^ 0x5107_3a7c_8e00_0004).random_bool(0.5) {
                SlowWatcher::Block
            } else {
                SlowWatcher::Close
            },
            cache_delay_ms: {
                let mut rng = StdRng::seed_from_u64(seed ^ 0x0de1_a7ed_cac4_0003);
                if rng.random_bool(0.25) {
                    rng.random_range(10..=200)
                } else {
                    0
                }
            },
            json_only: seed % 4 == 3,
        };
        let initial = (0..generator.rng.random_range(5..40))
            .filter_map(|_| generator.create())
            .collect();
        let mut scenario = Scenario {
            seed,
            initial,
            steps: Vec::with_capacity(steps),
            server,
        };
        // Faults that open a window, closed again this many steps later.
        let mut closing: Vec<(usize, Fault)> = Vec::new();
        for i in 0..steps {
            if let Some(pos) = closing.iter().position(|(at, _)| *at <= i) {
                let (_, fault) = closing.swap_remove(pos);
                scenario.steps.push(Step::Fault(fault));
                continue;
            }
            let roll = generator.rng.random_range(0..100);
            let step = if roll < 10 {
                let fault = generator.fault();
                if let Some(close) = window_end(&fault) {
                    let after = generator.rng.random_range(5..60);
                    closing.push((i + after, close));
                }
                Step::Fault(fault)
            } else if roll < 25 {
                Step::Pause(generator.rng.random_range(1..=12))
            } else {
                Step::Op(generator.op())
            };
            scenario.steps.push(step);
        }
        scenario
    }

    /// How many steps are faults.
    pub fn fault_count(&self) -> usize {
        self.steps
            .iter()
            .filter(|s| matches!(s, Step::Fault(_)))
            .count()
    }
}

/// The fault that closes the window `fault` opens, if it opens one.
pub(crate) fn window_end(fault: &Fault) -> Option<Fault> {
    match fault {
        Fault::Bookmarks(false) => Some(Fault::Bookmarks(true)),
        Fault::SlowStream(Some(_)) => Some(Fault::SlowStream(None)),
        _ => None,
    }
}

/// Draws writes and faults from a seeded generator, keeping a model of which pods exist so
/// that every write it draws is valid at its point of the schedule.
#[derive(Debug)]
pub struct Generator {
    rng: StdRng,
    names_per_namespace: usize,
    live: LiveSet,
    gold: BTreeSet<PodKey>,
    /// Pods deleted gracefully and not yet finished.
    terminating: BTreeSet<PodKey>,
    /// Pods whose deletion was finished while a finalizer held them.
    finished: BTreeSet<PodKey>,
    /// Pods with the finalizer.
    held: BTreeSet<PodKey>,
    annotations: u64,
}

/// The pods that exist: a vector for picking one at random in O(1), and each key's position.
#[derive(Debug, Default)]
struct LiveSet {
    keys: Vec<PodKey>,
    positions: HashMap<PodKey, usize>,
}

impl LiveSet {
    fn len(&self) -> usize {
        self.keys.len()
    }

    fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    fn contains(&self, key: &PodKey) -> bool {
        self.positions.contains_key(key)
    }

    fn insert(&mut self, key: PodKey) {
        if !self.positions.contains_key(&key) {
            self.positions.insert(key.clone(), self.keys.len());
            self.keys.push(key);
        }
    }

    fn remove(&mut self, key: &PodKey) {
        if let Some(i) = self.positions.remove(key) {
            self.keys.swap_remove(i);
            if let Some(moved) = self.keys.get(i) {
                self.positions.insert(moved.clone(), i);
            }
        }
    }
}

impl Generator {
    /// A generator for `seed`, over `names_per_namespace` names in each namespace (names are
    /// reused after a delete, so keys come back with new UIDs).
    pub fn new(seed: u64, names_per_namespace: usize) -> Self {
        Self {
            rng: StdRng::seed_from_u64(seed),
            names_per_namespace: names_per_namespace.max(1),
            live: LiveSet::default(),
            gold: BTreeSet::new(),
            terminating: BTreeSet::new(),
            finished: BTreeSet::new(),
            held: BTreeSet::new(),
            annotations: 0,
        }
    }

    /// Whether the model has a pod at `key`.
    pub fn live_key(&self, key: &PodKey) -> bool {
        self.live.contains(key)
    }

    /// How many pods exist in the model.
    pub fn live(&self) -> usize {
        self.live.len()
    }

    fn random_key(&mut self) -> PodKey {
        let namespace = NAMESPACES[self.rng.random_range(0..NAMESPACES.len())];
        let name = format!("pod-{}", self.rng.random_range(0..self.names_per_namespace));
        PodKey {
            namespace: namespace.to_owned(),
            name,
        }
    }

    fn pick_live(&mut self) -> Option<PodKey> {
        if self.live.is_empty() {
            return None;
        }
        let n = self.rng.random_range(0..self.live.len());
        Some(self.live.keys[n].clone())
    }

    /// Tells the model about a write made outside the generator (e.g. a bulk of initial
    /// creates).
    pub fn adopt(&mut self, op: &Op) {
        match op {
            Op::Create { key, gold, .. } | Op::Relabel { key, gold } => {
                self.live.insert(key.clone());
                if *gold {
                    self.gold.insert(key.clone());
                } else {
                    self.gold.remove(key);
                }
            }
            Op::Delete { key } => self.forget(key),
            Op::Terminate { key, .. } => {
                self.terminating.insert(key.clone());
            }
            Op::FinishDeletion { key } => {
                self.terminating.remove(key);
                if self.held.contains(key) {
                    self.finished.insert(key.clone());
                } else {
                    self.forget(key);
                }
            }
            Op::AddFinalizer { key } => {
                self.held.insert(key.clone());
            }
            Op::RemoveFinalizer { key } => {
                self.held.remove(key);
                if self.finished.contains(key) {
                    self.forget(key);
                }
            }
            Op::Move { .. } | Op::Annotate { .. } => {}
        }
    }

    /// A create of a free name, if one is found in a few tries.
    pub fn create(&mut self) -> Option<Op> {
        for _ in 0..8 {
            let key = self.random_key();
            if !self.live.contains(&key) {
                let gold = self.rng.random_bool(0.5);
                let node = self.rng.random_range(0..NODES);
                self.live.insert(key.clone());
                if gold {
                    self.gold.insert(key.clone());
                }
                return Some(Op::Create { key, node, gold });
            }
        }
        None
    }

    /// The next write: creates, moves, annotation changes, relabels and deletes.
    pub fn op(&mut self) -> Op {
        let roll = self.rng.random_range(0..100);
        let target = self.pick_live();
        match (roll, target) {
            (0..25, _) | (_, None) => match self.create() {
                Some(op) => op,
                None => {
                    let key = self.pick_live().expect("every name taken: pods exist");
                    self.delete(key)
                }
            },
            (25..45, Some(key)) => Op::Move {
                key,
                node: self.rng.random_range(0..NODES),
            },
            (45..60, Some(key)) => {
                self.annotations += 1;
                Op::Annotate {
                    key,
                    value: self.annotations,
                }
            }
            (60..80, Some(key)) => {
                let gold = !self.gold.contains(&key);
                if gold {
                    self.gold.insert(key.clone());
                } else {
                    self.gold.remove(&key);
                }
                Op::Relabel { key, gold }
            }
            (_, Some(key)) => self.removal(key),
        }
    }

    /// One of the removing writes: an immediate delete, or a step of a graceful deletion or
    /// of a finalizer's life.
    fn removal(&mut self, key: PodKey) -> Op {
        let roll = self.rng.random_range(0..10);
        let pick = |set: &BTreeSet<PodKey>, rng: &mut StdRng| {
            (!set.is_empty()).then(|| {
                let n = rng.random_range(0..set.len());
                set.iter().nth(n).cloned().expect("n < len")
            })
        };
        let op = match roll {
            0..5 => None,
            5 | 6 if !self.terminating.contains(&key) && !self.finished.contains(&key) => {
                Some(Op::Terminate {
                    key: key.clone(),
                    grace_seconds: 3600,
                })
            }
            7 => pick(&self.terminating, &mut self.rng).map(|key| Op::FinishDeletion { key }),
            8 if !self.held.contains(&key)
                && !self.terminating.contains(&key)
                && !self.finished.contains(&key) =>
            {
                Some(Op::AddFinalizer { key: key.clone() })
            }
            9 => pick(&self.held, &mut self.rng).map(|key| Op::RemoveFinalizer { key }),
            _ => None,
        };
        match op {
            Some(op) => {
                self.adopt(&op);
                op
            }
            None => self.delete(key),
        }
    }

    fn forget(&mut self, key: &PodKey) {
        self.live.remove(key);
        self.gold.remove(key);
        self.terminating.remove(key);
        self.finished.remove(key);
        self.held.remove(key);
    }

    fn delete(&mut self, key: PodKey) -> Op {
        self.forget(&key);
        Op::Delete { key }
    }

    /// A random fault from the whole catalogue.
    pub fn fault(&mut self) -> Fault {
        let rng = &mut self.rng;
        match rng.random_range(0..17) {
            0 => Fault::DropWatches,
            1 => Fault::DropMidEvent,
            2 => Fault::CloseWatches,
            3 => Fault::TornEvent,
            4 => Fault::GarbageLine,
            5 => Fault::DuplicateEvent,
            6 => Fault::WatchError(WatchError::Expired),
            7 => Fault::WatchError(match rng.random_range(0..5) {
                0 => WatchError::Gone,
                1 => WatchError::Internal,
                2 => WatchError::TooManyRequests {
                    retry_after: rng.random_range(0..=1),
                },
                3 => WatchError::TooLarge,
                _ => WatchError::NotAStatus,
            }),
            8 | 9 => Fault::FailNext {
                verb: if rng.random_bool(0.5) {
                    RequestVerb::List
                } else {
                    RequestVerb::Watch
                },
                times: rng.random_range(1..=3),
                failure: match rng.random_range(0..4) {
                    0 => RequestFailure::TooManyRequests {
                        retry_after: rng.random_range(0..=1),
                    },
                    1 => RequestFailure::Throttled {
                        retry_after: rng.random_range(0..=1),
                    },
                    2 => RequestFailure::Internal,
                    _ => RequestFailure::Unavailable,
                },
            },
            10 | 11 => Fault::Compact {
                drop_watches: rng.random_bool(0.6),
            },
            12 | 13 => Fault::Restart,
            14 => Fault::Bookmarks(false),
            _ => Fault::SlowStream(Some((rng.random_range(16..2048), rng.random_range(0..=3)))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_always_gives_the_same_scenario() {
        assert_eq!(Scenario::from_seed(42), Scenario::from_seed(42));
        assert_ne!(Scenario::from_seed(42), Scenario::from_seed(43));
    }

    #[test]
    fn about_a_quarter_of_the_seeds_get_opaque_resource_versions() {
        let opaque = (0..100)
            .filter(|&seed| Scenario::from_seed(seed).server.opaque_resource_versions)
            .count();
        assert!((10..=40).contains(&opaque), "{opaque} of 100 seeds");
    }

    #[test]
    fn the_tally_counts_every_optional_setting_over_the_seeds() {
        let scenarios: Vec<Scenario> = (0..100).map(Scenario::from_seed).collect();
        let tally = server_settings_tally(&scenarios);
        for name in [
            "short history",
            "small watch buffer",
            "slow watchers waited for",
            "streaming list",
            "relist by page",
            "opaque resource versions",
            "late watch cache",
        ] {
            let n = tally.get(name).copied().unwrap_or(0);
            assert!((1..100).contains(&n), "{name}: {n} of 100");
        }
        let late = scenarios
            .iter()
            .filter(|s| s.server.cache_delay_ms > 0)
            .count();
        assert_eq!(tally["late watch cache"], late);
    }

    #[test]
    fn a_quarter_of_the_seeds_read_json_only_and_the_rest_protobuf() {
        let scenarios: Vec<Scenario> = (0..100).map(Scenario::from_seed).collect();
        for scenario in &scenarios {
            let want = if scenario.seed % 4 == 3 {
                Encoding::Json
            } else {
                Encoding::Protobuf
            };
            assert_eq!(scenario.server.encoding(), want, "seed {}", scenario.seed);
        }
        let tally = encodings_tally(&scenarios);
        assert_eq!((tally["json"], tally["protobuf"]), (25, 75));
        assert_eq!(
            encodings_tally(&scenarios[..3]),
            BTreeMap::from([("json", 0), ("protobuf", 3)])
        );
    }

    #[test]
    fn about_a_quarter_of_the_seeds_get_a_late_watch_cache() {
        let delays: Vec<u64> = (0..100)
            .map(|seed| Scenario::from_seed(seed).server.cache_delay_ms)
            .filter(|&ms| ms > 0)
            .collect();
        assert!((10..=40).contains(&delays.len()), "{delays:?}");
        assert!(
            delays.iter().all(|ms| (10..=200).contains(ms)),
            "{delays:?}"
        );
    }

    #[test]
    fn about_half_the_seeds_relist_by_page() {
        let by_page = (0..50)
            .filter(|&seed| Scenario::from_seed(seed).server.relist_by_page)
            .count();
        assert!(
            (15..=35).contains(&by_page),
            "{by_page} of 50 seeds relist by page"
        );
    }

    #[test]
    fn every_write_is_valid_where_it_stands() {
        let mut kinds = BTreeSet::new();
        for seed in 0..200 {
            let scenario = Scenario::from_seed(seed);
            let mut live = BTreeSet::new();
            let mut terminating = BTreeSet::new();
            let mut finished = BTreeSet::new();
            let mut held = BTreeSet::new();
            let writes = scenario
                .initial
                .iter()
                .chain(scenario.steps.iter().filter_map(|s| match s {
                    Step::Op(op) => Some(op),
                    _ => None,
                }));
            for op in writes {
                match op {
                    Op::Create { key, .. } => assert!(live.insert(key.clone()), "{seed}: {op:?}"),
                    Op::Delete { key } => {
                        assert!(live.remove(key), "{seed}: {op:?}");
                        terminating.remove(key);
                        finished.remove(key);
                        held.remove(key);
                    }
                    Op::Move { key, .. } | Op::Annotate { key, .. } | Op::Relabel { key, .. } => {
                        assert!(live.contains(key), "{seed}: {op:?}");
                    }
                    Op::Terminate { key, .. } => {
                        assert!(live.contains(key), "{seed}: {op:?}");
                        assert!(terminating.insert(key.clone()), "{seed}: {op:?}");
                        assert!(!finished.contains(key), "{seed}: {op:?}");
                    }
                    Op::FinishDeletion { key } => {
                        assert!(terminating.remove(key), "{seed}: {op:?}");
                        if held.contains(key) {
                            finished.insert(key.clone());
                        } else {
                            live.remove(key);
                        }
                        kinds.insert("finish");
                    }
                    Op::AddFinalizer { key } => {
                        assert!(
                            live.contains(key) && !terminating.contains(key),
                            "{seed}: {op:?}"
                        );
                        assert!(held.insert(key.clone()), "{seed}: {op:?}");
                    }
                    Op::RemoveFinalizer { key } => {
                        assert!(held.remove(key), "{seed}: {op:?}");
                        if finished.remove(key) {
                            live.remove(key);
                            kinds.insert("finalized");
                        }
                    }
                }
            }
        }
        assert!(
            kinds.contains("finish") && kinds.contains("finalized"),
            "the mix finishes graceful deletions and removes objects by their last finalizer: {kinds:?}"
        );
    }

    #[test]
    fn windows_are_closed_by_a_later_step_or_by_the_end() {
        let scenario = Scenario::from_seed(7);
        let mut open = 0i32;
        for step in &scenario.steps {
            match step {
                Step::Fault(Fault::Bookmarks(false)) => open += 1,
                Step::Fault(Fault::Bookmarks(true)) => open -= 1,
                _ => {}
            }
            assert!(open >= 0);
        }
        assert!(scenario.fault_count() > 0);
    }

    #[test]
    fn relabels_flip_the_gold_label() {
        let mut g = Generator::new(1, 5);
        let mut gold = BTreeSet::new();
        for _ in 0..2000 {
            match g.op() {
                Op::Create {
                    key, gold: true, ..
                } => {
                    gold.insert(key);
                }
                Op::Relabel { key, gold: to } => {
                    assert_eq!(gold.contains(&key), !to, "a relabel flips the label");
                    if to {
                        gold.insert(key);
                    } else {
                        gold.remove(&key);
                    }
                }
                Op::Delete { key } => {
                    gold.remove(&key);
                }
                // Removals by a finished deletion or the last finalizer.
                Op::FinishDeletion { key } | Op::RemoveFinalizer { key } if g.live_key(&key) => {}
                Op::FinishDeletion { key } | Op::RemoveFinalizer { key } => {
                    gold.remove(&key);
                }
                _ => {}
            }
        }
    }
}
