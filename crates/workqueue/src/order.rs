//! The order in which a [`WorkQueue`](crate::WorkQueue) hands out its queued items: first in,
//! first out, or by priority and fair across tenants.
//!
//! # The fair order
//!
//! Items are queued in *levels*, one per priority; the highest level that has items is served
//! first. Within a level each tenant has a *lane* (first in, first out), and the lanes take
//! turns: the tenants that have items form a rotation, in the order they came to have some;
//! each turn hands out the front item of the first tenant's lane and sends that tenant to the
//! back of the rotation, or out of it once its lane is empty. A tenant with 10,000 items and one
//! with a single item, at the same priority, each get every other turn.
//!
//! Raising a queued item's priority moves it: its entry in the old lane is left behind as a
//! stale one (recognised by its sequence number, which the queue's record of the item no
//! longer holds) and skipped when it comes up, so a raise costs no search. Each lane counts its
//! live entries: a lane whose last live entry leaves is emptied at once, stale entries and all,
//! so a tenant's place in the rotation is exactly as if the entry had been removed; a lane
//! whose stale entries come to outnumber its live ones (by a small slack) is compacted, so
//! stale entries never take more room than the live ones; and a lane without stale entries
//! hands out its front entry without asking whether it is live.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;
use std::sync::Arc;

use foldhash::fast::RandomState;

/// The priority of the items of an initial list and of resyncs (controller-runtime's
/// `LowPriority`): below the default, 0, the priority of real changes. Higher runs first.
pub const LOW_PRIORITY: i32 = -100;

/// The tenant of a `namespace/name` key: the namespace, the text before the first `/` (empty
/// for a cluster-scoped key, which has none). The default tenant function of
/// [`WorkQueueBuilder::priority`](crate::WorkQueueBuilder::priority).
///
/// ```
/// use informer_workqueue::namespace_of;
///
/// assert_eq!(namespace_of("default/web-0"), "default");
/// assert_eq!(namespace_of("node-1"), "");
/// ```
pub fn namespace_of(key: &str) -> &str {
    key.split_once('/').map_or("", |(namespace, _)| namespace)
}

/// Which tenant an item belongs to.
pub(crate) type TenantFn<T> = Arc<dyn for<'a> Fn(&'a T) -> Cow<'a, str> + Send + Sync>;

/// The sequence number of no entry: what the record of an item that is not queued holds.
pub(crate) const NOT_QUEUED: u64 = 0;

/// The queued items, in the order they are handed out.
pub(crate) enum Order<T> {
    /// First in, first out (client-go's queue).
    Fifo(VecDeque<T>),
    /// By priority, then in turns across tenants.
    Fair(Fair<T>),
}

impl<T> Order<T> {
    /// How many items are queued.
    pub(crate) fn len(&self) -> usize {
        match self {
            Self::Fifo(queue) => queue.len(),
            Self::Fair(fair) => fair.len,
        }
    }

    /// Whether the order takes priorities into account.
    pub(crate) fn is_fair(&self) -> bool {
        matches!(self, Self::Fair(_))
    }

    /// Queues `item` (not queued yet) at `priority`; the sequence number of its entry
    /// ([`NOT_QUEUED`] in the first-in-first-out order, which has none). Leaves the order
    /// unchanged if the tenant function panics.
    pub(crate) fn push(&mut self, item: T, priority: i32) -> u64 {
        match self {
            Self::Fifo(queue) => {
                queue.push_back(item);
                NOT_QUEUED
            }
            Self::Fair(fair) => fair.push(item, priority),
        }
    }

    /// The next item, if any. `is_live(item, seq)` tells whether an entry of the fair order is
    /// the item's live one.
    pub(crate) fn pop(&mut self, is_live: impl Fn(&T, u64) -> bool) -> Option<T> {
        match self {
            Self::Fifo(queue) => queue.pop_front(),
            Self::Fair(fair) => fair.pop(is_live),
        }
    }
}

/// How many stale entries a lane may hold beyond as many as its live ones.
const STALE_SLACK: usize = 8;

/// The room for entries an empty lane keeps.
const LANE_ROOM: usize = 64;

/// A lane with too many stale entries, which [`Fair::compact`] drops.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Crowded {
    priority: i32,
    lane: usize,
}

/// The fair order (see the module's docs).
pub(crate) struct Fair<T> {
    tenant: TenantFn<T>,
    /// The levels that have items, by priority.
    levels: BTreeMap<i32, Level<T>>,
    /// The last level to run empty, kept for the next level made (its lanes and their names
    /// are made once, not each time a queue that keeps up runs empty).
    spare: Option<Level<T>>,
    /// The last sequence number given to an entry.
    seq: u64,
    /// Live entries, all levels together.
    len: usize,
}

/// The items of one priority.
struct Level<T> {
    /// Each tenant's place in `lanes`.
    index: HashMap<Arc<str>, usize, RandomState>,
    /// Every tenant's lane, with items or not (dropped with the level).
    lanes: Vec<Lane<T>>,
    /// The lanes that have live entries, in the order of their turns.
    rotation: VecDeque<usize>,
}

/// One tenant's items within a level, first in, first out.
struct Lane<T> {
    entries: VecDeque<(u64, T)>,
    /// Entries that are their item's live one; the others are stale.
    live: usize,
}

impl<T> Fair<T> {
    /// An empty fair order whose tenants `tenant` tells.
    pub(crate) fn new(tenant: TenantFn<T>) -> Self {
        Self {
            tenant,
            levels: BTreeMap::new(),
            spare: None,
            seq: NOT_QUEUED,
            len: 0,
        }
    }

    /// Queues `item` at `priority` behind its tenant's other items; its entry's sequence
    /// number.
    fn push(&mut self, item: T, priority: i32) -> u64 {
        let tenant = (self.tenant)(&item);
        let lane = lane(&mut self.levels, &mut self.spare, priority, &tenant);
        enter(lane, &mut self.seq, &mut self.len, item)
    }

    /// Moves queued `item` from `from` to the higher priority `to`: its entry at `from` goes
    /// stale. The new entry's sequence number, and the lane it left if that lane now holds
    /// more stale entries than [`compact`](Self::compact) lets it keep. Leaves the order
    /// unchanged if the tenant function panics.
    pub(crate) fn raise(&mut self, item: T, from: i32, to: i32) -> (u64, Option<Crowded>) {
        let tenant = (self.tenant)(&item);
        let mut crowded = None;
        if let Some(level) = self.levels.get_mut(&from)
            && let Some(&at) = level.index.get(&*tenant)
        {
            let lane = &mut level.lanes[at];
            lane.live -= 1;
            self.len -= 1;
            if lane.live == 0 {
                lane.empty();
                level.rotation.retain(|&turn| turn != at);
                if level.rotation.is_empty() {
                    self.spare = self.levels.remove(&from);
                }
            } else if lane.entries.len() - lane.live > lane.live + STALE_SLACK {
                crowded = Some(Crowded {
                    priority: from,
                    lane: at,
                });
            }
        }
        let lane = lane(&mut self.levels, &mut self.spare, to, &tenant);
        (enter(lane, &mut self.seq, &mut self.len, item), crowded)
    }

    /// Drops the stale entries of a crowded lane (`is_live` tells the live ones), so that a
    /// lane never holds more than its live entries and as many stale ones again, plus
    /// [`STALE_SLACK`]: a level that is not served (the levels above it always have items)
    /// does not grow with the raises of its items. Costs a look-up per entry, once at least
    /// as many raises as the lane has live entries have made it crowded again.
    pub(crate) fn compact(&mut self, crowded: Crowded, is_live: impl Fn(&T, u64) -> bool) {
        let Some(level) = self.levels.get_mut(&crowded.priority) else {
            return;
        };
        let lane = &mut level.lanes[crowded.lane];
        lane.entries.retain(|(seq, item)| is_live(item, *seq));
        debug_assert_eq!(
            lane.entries.len(),
            lane.live,
            "a compacted lane holds its live entries"
        );
    }

    /// Hands out the front live item of the first tenant's lane at the highest level, and
    /// gives the next tenant its turn.
    fn pop(&mut self, is_live: impl Fn(&T, u64) -> bool) -> Option<T> {
        let mut highest = self.levels.last_entry()?;
        let level = highest.get_mut();
        let turn = level.rotation.pop_front().expect("a level has a tenant");
        let lane = &mut level.lanes[turn];
        let item = loop {
            let (seq, item) = lane.entries.pop_front().expect("a lane has a live entry");
            // Without stale entries in the lane, the front one is live: no need to ask.
            if lane.entries.len() + 1 == lane.live || is_live(&item, seq) {
                break item;
            }
        };
        lane.live -= 1;
        self.len -= 1;
        if lane.live > 0 {
            level.rotation.push_back(turn);
        } else {
            lane.empty();
            if level.rotation.is_empty() {
                self.spare = Some(highest.remove());
            }
        }
        Some(item)
    }
}

/// `tenant`'s lane at `priority`, made (with its level) if need be; a tenant whose lane has no
/// live entry joins the back of the rotation.
fn lane<'l, T>(
    levels: &'l mut BTreeMap<i32, Level<T>>,
    spare: &mut Option<Level<T>>,
    priority: i32,
    tenant: &str,
) -> &'l mut Lane<T> {
    let level = levels.entry(priority).or_insert_with(|| {
        spare.take().unwrap_or_else(|| Level {
            index: HashMap::default(),
            lanes: Vec::new(),
            rotation: VecDeque::new(),
        })
    });
    let at = match level.index.get(tenant) {
        Some(&at) => at,
        None => {
            level.lanes.push(Lane {
                entries: VecDeque::new(),
                live: 0,
            });
            level.index.insert(Arc::from(tenant), level.lanes.len() - 1);
            level.lanes.len() - 1
        }
    };
    let lane = &mut level.lanes[at];
    if lane.live == 0 {
        // What is left in it is stale: it starts over, and takes its turn.
        lane.empty();
        level.rotation.push_back(at);
    }
    lane
}

impl<T> Lane<T> {
    /// Drops the entries of a lane without live ones (stale, all of them), and the room of a
    /// backlog it held.
    fn empty(&mut self) {
        self.entries.clear();
        self.entries.shrink_to(LANE_ROOM);
    }
}

/// Puts `item` at the back of `lane` with the next sequence number, which it returns.
fn enter<T>(lane: &mut Lane<T>, seq: &mut u64, len: &mut usize, item: T) -> u64 {
    *seq += 1;
    lane.entries.push_back((*seq, item));
    lane.live += 1;
    *len += 1;
    *seq
}

impl<T> fmt::Debug for Fair<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fair")
            .field("queued", &self.len)
            .field("priorities", &self.levels.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    /// A level that is never served, while one of its items is raised and added back over
    /// and over, keeps at most its live entries and as many stale ones again, plus the slack.
    #[test]
    fn stale_entries_stay_bounded_in_a_level_never_served() {
        let mut fair = Fair::<u32>::new(Arc::new(|_: &u32| Cow::Borrowed("")));
        let mut live: HashMap<u32, u64> = HashMap::new();
        for waiting in 0..4 {
            live.insert(waiting, fair.push(waiting, LOW_PRIORITY));
        }
        for _ in 0..1_000 {
            live.insert(9, fair.push(9, LOW_PRIORITY));
            let (seq, crowded) = fair.raise(9, LOW_PRIORITY, 0);
            live.insert(9, seq);
            if let Some(crowded) = crowded {
                fair.compact(crowded, |item, seq| live.get(item) == Some(&seq));
            }
            assert_eq!(fair.pop(|item, seq| live.get(item) == Some(&seq)), Some(9));
            live.remove(&9);
            let level = &fair.levels[&LOW_PRIORITY];
            let lane = &level.lanes[0];
            assert_eq!(lane.live, 4);
            // 4 live, 4 stale and the slack of 8, and the one raised last: 17 at most, where
            // without compaction the lane would grow by one entry a round.
            assert!(lane.entries.len() <= 17, "{} entries", lane.entries.len());
        }
        let order: Vec<_> =
            std::iter::from_fn(|| fair.pop(|item, seq| live.get(item) == Some(&seq))).collect();
        assert_eq!(
            order,
            [0, 1, 2, 3],
            "the waiting items, in order, and nothing stale"
        );
    }
}
