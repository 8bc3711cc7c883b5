//! What a sharded controller shares between its handlers, its workers and the loop that follows
//! its shard assignment: the shard of an object, the terms held now, the per-shard counters,
//! and the resource versions that tell a shard's arriving objects from real changes.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::Duration;

use informer::{ShardBy, ShardField, ShardSelector};
use informer_leaderelection::{ShardRunner, ShardStats, ShardTerm};
use informer_shard::ShardRange;
use informer_store::SharedIdentity;
use informer_workqueue::LOW_PRIORITY;
use parking_lot::{Mutex, RwLock};
use tokio::time::Instant;

/// How long a shard's term may wait to begin before the controller logs a WARN naming the
/// informers that have not listed the shard yet (once per term). A term waits for the relists
/// at the new shard set; one that waits this long has a relist that keeps failing (a `403` on a
/// resource the controller owns, say) or an informer whose queue never empties.
pub const SHARD_WAIT_WARNING: Duration = Duration::from_secs(60);

/// Where the handlers and workers find the controller's shard assignment (`None`: not
/// sharded).
pub(crate) type ShardSlot = Arc<RwLock<Option<Arc<Sharded>>>>;

/// The shard assignment of a sharded controller, as its parts see it.
pub(crate) struct Sharded {
    pub(crate) runner: ShardRunner,
    /// How many shards the hash space is split into (the runner's).
    pub(crate) count: u32,
    /// The field hashed: 0 the uid, 1 the namespace (set before the controller runs).
    field: AtomicU8,
    /// The terms this controller holds, by shard: a key is reconciled only under one that has
    /// begun.
    terms: RwLock<BTreeMap<u32, Held>>,
    counters: Box<[Counters]>,
    /// Keys dequeued with no known object (neither cached nor a remembered deletion).
    unplaced: AtomicU64,
    /// Where the keys queued by a related object's change belong: that object's shard (see
    /// [`place`](Self::place)). Taken when the key is dequeued, so it holds at most the keys
    /// queued.
    placed: Mutex<HashMap<Arc<str>, Placement>>,
}

/// A term held, and whether it has begun: a term begins once every informer's cache holds a
/// complete list of its shard, and only then are its keys reconciled.
struct Held {
    term: ShardTerm,
    begun: bool,
    /// When it was held: how long it has waited to begin.
    since: Instant,
    /// Whether its wait has been told at WARN ([`SHARD_WAIT_WARNING`]).
    warned: bool,
}

/// Where a key woken by a related object belongs if its own object is not known (an owner
/// gone): the related object's shard, and the controller owner's uid that object names (the
/// gone owner's, which a key recreated since does not have). A deletion queued again by its
/// reconcile's outcome is placed in the shard it was reconciled in, with its object's uid.
#[derive(Debug, Clone)]
pub(crate) struct Placement {
    pub(crate) shard: u32,
    pub(crate) owner_uid: Option<Arc<str>>,
}

/// One shard's counters.
#[derive(Default)]
struct Counters {
    terms: AtomicU64,
    queued: AtomicU64,
    reconciles: AtomicU64,
    skipped: AtomicU64,
}

impl Sharded {
    pub(crate) fn new(runner: ShardRunner) -> Self {
        let count = runner.config().shards;
        Self {
            runner,
            count,
            field: AtomicU8::new(0),
            terms: RwLock::default(),
            counters: (0..count).map(|_| Counters::default()).collect(),
            unplaced: AtomicU64::new(0),
            placed: Mutex::default(),
        }
    }

    pub(crate) fn field(&self) -> ShardField {
        match self.field.load(Ordering::Relaxed) {
            0 => ShardField::Uid,
            _ => ShardField::Namespace,
        }
    }

    pub(crate) fn set_field(&self, field: ShardField) {
        let v = match field {
            ShardField::Uid => 0,
            ShardField::Namespace => 1,
        };
        self.field.store(v, Ordering::Relaxed);
    }

    /// The shard of `obj`: the hash of its uid or namespace (`""` when it has none, as the
    /// informer's filter and the API server hash it).
    pub(crate) fn shard_of<K: 'static>(&self, identity: &SharedIdentity<K>, obj: &K) -> u32 {
        self.shard_of_related(identity, ShardBy::Object, obj)
    }

    /// The shard of a related informer's object, hashed as that informer hashes it (`by`):
    /// a child built with [`ShardBy::Owner`] is in its controller owner's shard, so the owner
    /// keys it maps to are too.
    pub(crate) fn shard_of_related<C: 'static>(
        &self,
        identity: &SharedIdentity<C>,
        by: ShardBy,
        obj: &C,
    ) -> u32 {
        let hash = informer_shard::hash(by.value(self.field(), identity, obj));
        // `count` is at least 1 (the runner's configuration is validated).
        ShardRange::index_of(hash, self.count).unwrap_or(0)
    }

    /// Where a related object's keys belong: its shard, hashed as its informer hashes it
    /// (`by`), and the controller owner uid it names.
    pub(crate) fn placement_of<C: 'static>(
        &self,
        identity: &SharedIdentity<C>,
        by: ShardBy,
        obj: &C,
    ) -> Placement {
        Placement {
            shard: self.shard_of_related(identity, by, obj),
            owner_uid: identity.controller_uid(obj).map(Arc::from),
        }
    }

    /// Records that `key` was queued for a related object placed so: if its own object is not
    /// known when it is dequeued (an owner gone, woken by its orphaned child), it is reconciled
    /// in that shard, whose term the child's replica holds, instead of dropped.
    pub(crate) fn place(&self, key: &str, placement: &Placement) {
        self.placed.lock().insert(Arc::from(key), placement.clone());
    }

    /// Places `key` again where a reconcile of its deletion found it, unless a related object
    /// has placed it since: a retry queued by the reconcile's outcome (an error's backoff, a
    /// requeue after a delay) is reconciled in the same shard, for the same uid, whether the
    /// key had no object at all (an owner gone, woken by its orphan) or a last known state let
    /// go of by then (a deletion reconciled, and asked to run again).
    pub(crate) fn place_again(&self, key: &Arc<str>, placement: Placement) {
        self.placed
            .lock()
            .entry(Arc::clone(key))
            .or_insert(placement);
    }

    /// Where `key` was last placed by a related object, forgotten as it is read.
    pub(crate) fn take_placement(&self, key: &str) -> Option<Placement> {
        self.placed.lock().remove(key)
    }

    /// Whether the term of `obj`'s shard is held here (begun or not): the shard's objects
    /// are cached here, or about to be.
    pub(crate) fn holds_object<K: 'static>(&self, identity: &SharedIdentity<K>, obj: &K) -> bool {
        let shard = self.shard_of(identity, obj);
        self.terms.read().contains_key(&shard)
    }

    /// Whether the term of `obj`'s shard has begun here: its changes are this replica's to
    /// reconcile.
    pub(crate) fn serves_object<K: 'static>(&self, identity: &SharedIdentity<K>, obj: &K) -> bool {
        self.serves_shard(self.shard_of(identity, obj))
    }

    /// Whether `shard`'s term has begun here.
    pub(crate) fn serves_shard(&self, shard: u32) -> bool {
        self.terms.read().get(&shard).is_some_and(|h| h.begun)
    }

    /// A clone of `shard`'s term, if held, begun and current: what a reconcile of its keys
    /// holds.
    pub(crate) fn term(&self, shard: u32) -> Option<ShardTerm> {
        let terms = self.terms.read();
        let held = terms.get(&shard).filter(|h| h.begun)?;
        held.term.is_current().then(|| held.term.clone())
    }

    /// A clone of `shard`'s term, if held and current, begun or not.
    pub(crate) fn held_term(&self, shard: u32) -> Option<ShardTerm> {
        let terms = self.terms.read();
        let held = terms.get(&shard)?;
        held.term.is_current().then(|| held.term.clone())
    }

    /// The shards held, and their terms' numbers.
    pub(crate) fn held(&self) -> BTreeMap<u32, u64> {
        let terms = self.terms.read();
        terms.iter().map(|(s, h)| (*s, h.term.number())).collect()
    }

    /// Holds `term` (a new one, or the next term on a shard), not begun.
    pub(crate) fn hold(&self, term: ShardTerm) {
        self.counters[term.shard() as usize]
            .terms
            .fetch_add(1, Ordering::Relaxed);
        let held = Held {
            term,
            begun: false,
            since: Instant::now(),
            warned: false,
        };
        self.terms.write().insert(held.term.shard(), held);
    }

    /// The shards whose terms are held but have not begun.
    pub(crate) fn waiting(&self) -> Vec<u32> {
        let terms = self.terms.read();
        terms
            .iter()
            .filter(|(_, h)| !h.begun)
            .map(|(s, _)| *s)
            .collect()
    }

    /// Whether a cache whose last complete list was at `listed` holds every object of `shard`.
    pub(crate) fn listed_whole(&self, listed: Option<&ShardSelector>, shard: u32) -> bool {
        let Ok(range) = ShardRange::shard(shard, self.count) else {
            return false;
        };
        listed.is_some_and(|set| set.field() == self.field() && set.covers(range))
    }

    /// When the first term still waiting to begin and not yet told reaches
    /// [`SHARD_WAIT_WARNING`].
    pub(crate) fn next_wait_warning(&self) -> Option<Instant> {
        let terms = self.terms.read();
        terms
            .values()
            .filter(|h| !h.begun && !h.warned)
            .map(|h| h.since + SHARD_WAIT_WARNING)
            .min()
    }

    /// The terms that have waited [`SHARD_WAIT_WARNING`] or longer to begin and were not told
    /// yet, with how long each has waited: marked told.
    pub(crate) fn take_wait_warnings(&self) -> Vec<(u32, Duration)> {
        let now = Instant::now();
        let mut terms = self.terms.write();
        terms
            .iter_mut()
            .filter(|(_, h)| !h.begun && !h.warned && now >= h.since + SHARD_WAIT_WARNING)
            .map(|(s, h)| {
                h.warned = true;
                (*s, now - h.since)
            })
            .collect()
    }

    /// Begins the terms held on `shards`: their keys are reconciled from now on. Returns the
    /// ones whose wait had been told at WARN, with how long each waited.
    pub(crate) fn begin(&self, shards: &BTreeSet<u32>) -> Vec<(u32, Duration)> {
        let mut terms = self.terms.write();
        let mut told = Vec::new();
        for shard in shards {
            if let Some(held) = terms.get_mut(shard) {
                held.begun = true;
                if held.warned {
                    told.push((*shard, held.since.elapsed()));
                }
            }
        }
        told
    }

    /// Lets go of `shards`' terms: the clones held by reconciles under way are the last ones.
    pub(crate) fn release(&self, shards: impl IntoIterator<Item = u32>) {
        let mut terms = self.terms.write();
        for shard in shards {
            terms.remove(&shard);
        }
    }

    /// Lets go of every term.
    pub(crate) fn release_all(&self) {
        self.terms.write().clear();
    }

    /// The shard set the informers cache: the shards held, or none at all.
    pub(crate) fn selector(&self) -> ShardSelector {
        let field = self.field();
        let held: Vec<u32> = self.terms.read().keys().copied().collect();
        ShardSelector::for_shards(field, self.count, held)
            .unwrap_or_else(|_| ShardSelector::none(field))
    }

    pub(crate) fn note_queued(&self, shard: u32, keys: u64) {
        self.counters[shard as usize]
            .queued
            .fetch_add(keys, Ordering::Relaxed);
    }

    pub(crate) fn note_reconcile(&self, shard: u32) {
        self.counters[shard as usize]
            .reconciles
            .fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn note_skipped(&self, shard: u32) {
        self.counters[shard as usize]
            .skipped
            .fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn note_unplaced(&self) {
        self.unplaced.fetch_add(1, Ordering::Relaxed);
    }

    fn stats(&self) -> ControllerShardStats {
        let terms = self.terms.read();
        let shards = (0..self.count)
            .zip(self.counters.iter())
            .map(|(shard, c)| ShardCounts {
                shard,
                owned: terms.contains_key(&shard),
                begun: terms.get(&shard).is_some_and(|h| h.begun),
                waiting_for: terms
                    .get(&shard)
                    .filter(|h| !h.begun)
                    .map(|h| h.since.elapsed()),
                terms: c.terms.load(Ordering::Relaxed),
                queued_at_start: c.queued.load(Ordering::Relaxed),
                reconciles: c.reconciles.load(Ordering::Relaxed),
                skipped: c.skipped.load(Ordering::Relaxed),
            })
            .collect();
        ControllerShardStats {
            identity: self.runner.config().identity.clone(),
            field: self.field(),
            assignment: self.runner.stats(),
            shards,
            unplaced: self.unplaced.load(Ordering::Relaxed),
        }
    }
}

/// The resource versions an informer's cache had reached when its shard set last grew (a
/// later add of an object at that version or before is one of the shards' existing objects
/// arriving by the relist, not a new one, and is queued behind real changes, as a term's
/// initial keys are), and when each shard's term began (an add at that version or before was
/// in the cache then, so the term's beginning queued its keys: it is not queued again).
#[derive(Debug, Default)]
pub(crate) struct Arrivals {
    grew: AtomicU64,
    began: Mutex<HashMap<u32, u64>>,
}

impl Arrivals {
    /// The shard set grew when the cache was at `version` (ignored unless a decimal integer).
    pub(crate) fn grew_at(&self, version: &str) {
        if let Ok(v) = version.parse::<u64>() {
            self.grew.fetch_max(v, Ordering::Relaxed);
        }
    }

    /// The terms on `shards` begin with the cache at `version`; forgotten for a version that
    /// is not a decimal integer (every add is then queued).
    pub(crate) fn began_at(&self, shards: &BTreeSet<u32>, version: &str) {
        let mut began = self.began.lock();
        let v = version.parse::<u64>().ok();
        for shard in shards {
            match v {
                Some(v) => began.insert(*shard, v),
                None => began.remove(shard),
            };
        }
    }

    /// Whether an add of an object of `shard` at `version` was in the cache when the shard's
    /// term began (its version no newer than the cache's then): that beginning queued its keys.
    pub(crate) fn queued_at_begin(&self, shard: u32, version: Option<&str>) -> bool {
        let Some(v) = version.and_then(|v| v.parse::<u64>().ok()) else {
            return false;
        };
        self.began.lock().get(&shard).is_some_and(|b| v <= *b)
    }

    /// The priority of an add (not of the initial list) of an object at `version`:
    /// [`LOW_PRIORITY`] for an arrival, `None` for a real change.
    pub(crate) fn priority(&self, version: Option<&str>) -> Option<i32> {
        let before = self.grew.load(Ordering::Relaxed);
        let v = version?.parse::<u64>().ok()?;
        (before > 0 && v <= before).then_some(LOW_PRIORITY)
    }
}

/// Reads a sharded controller's shard counters at any time, from any thread
/// ([`Controller::shard_stats`](crate::Controller::shard_stats)). Cheap to clone.
#[derive(Clone)]
pub struct ShardStatsHandle {
    pub(crate) sharded: Arc<Sharded>,
}

impl std::fmt::Debug for ShardStatsHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardStatsHandle")
            .field("runner", &self.sharded.runner)
            .finish()
    }
}

impl ShardStatsHandle {
    /// The counters now.
    pub fn stats(&self) -> ControllerShardStats {
        self.sharded.stats()
    }
}

/// A sharded controller's shard counters: the assignment's, and each shard's.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ControllerShardStats {
    /// This replica's identity in the assignment.
    pub identity: String,
    /// The field hashed.
    pub field: ShardField,
    /// The assignment's counts for this replica: shards owned, terms started, handed off (a
    /// graceful move out) and lost (the renew deadline, or the Lease found taken).
    pub assignment: ShardStats,
    /// One entry per shard, in order.
    pub shards: Vec<ShardCounts>,
    /// Keys dequeued whose object was neither cached nor a remembered deletion, and that no
    /// related object had placed in a shard: no shard could be told, so they were not
    /// reconciled.
    pub unplaced: u64,
}

/// One shard's counters in a sharded controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShardCounts {
    /// The shard's index.
    pub shard: u32,
    /// Whether this replica holds the shard's term now.
    pub owned: bool,
    /// Whether that term has begun: every cache of the controller holds a complete list of
    /// the shard, and its keys are reconciled here. A term held but not begun is waiting for
    /// the relists at the new shard set.
    pub begun: bool,
    /// How long the term held has waited to begin, while it has not (`None` once begun, or
    /// with no term held). Past [`SHARD_WAIT_WARNING`] the controller logs a WARN naming the
    /// informers whose caches have not listed the shard.
    pub waiting_for: Option<Duration>,
    /// Terms of this shard started here (moves in), begun or not.
    pub terms: u64,
    /// Keys its terms queued as they began (the cached keys of the shard and the remembered
    /// deletions; the objects arriving with the relist are queued as they arrive).
    pub queued_at_start: u64,
    /// Reconciles of its keys started here, each under a term of the shard.
    pub reconciles: u64,
    /// Keys of the shard dequeued while its term was not held here, or held but not begun:
    /// dropped, not reconciled (the shard's owner queues them when its term begins).
    pub skipped: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_add_no_newer_than_its_shards_beginning_was_queued_by_it() {
        let arrivals = Arrivals::default();
        // No term has begun: every add is queued.
        assert!(!arrivals.queued_at_begin(1, Some("5")));
        arrivals.began_at(&BTreeSet::from([1, 2]), "10");
        assert!(arrivals.queued_at_begin(1, Some("10")));
        assert!(arrivals.queued_at_begin(2, Some("3")));
        // Newer than the cache when the term began: a change to queue.
        assert!(!arrivals.queued_at_begin(1, Some("11")));
        // Another shard, or versions that do not compare: queued.
        assert!(!arrivals.queued_at_begin(3, Some("3")));
        assert!(!arrivals.queued_at_begin(1, Some("opaque")));
        assert!(!arrivals.queued_at_begin(1, None));
        // A later term on the shard moves its mark; a cache at an opaque version forgets it.
        arrivals.began_at(&BTreeSet::from([1]), "20");
        assert!(arrivals.queued_at_begin(1, Some("15")));
        arrivals.began_at(&BTreeSet::from([2]), "opaque");
        assert!(!arrivals.queued_at_begin(2, Some("3")));
    }
}
