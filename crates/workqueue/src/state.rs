//! What a [`WorkQueue`](crate::WorkQueue) keeps under its lock, and the changes of it that the
//! queue's operations are made of.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;

use foldhash::fast::RandomState;
use tokio::time::Instant;

use crate::metrics::{Numbers, Sampler, Stamp};
use crate::order::{NOT_QUEUED, Order};

/// The priority of an add that names none.
pub(crate) const DEFAULT_PRIORITY: i32 = 0;

/// Whether, and since when, an item is being processed.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Started {
    /// Not timed (no provider, or not in the sample).
    Untimed,
    /// Timed from its get.
    Timed(Stamp),
    /// Not timed, but seen in progress by a read of the stats at this instant.
    Seen(Instant),
}

/// An item being processed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Processing {
    pub(crate) started: Started,
    /// The priority it was handed out with, which its requeues keep.
    pub(crate) priority: i32,
}

/// An item waiting: queued, or to be queued when its processing is done.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Waiting {
    /// When it was added, if it is timed.
    pub(crate) stamp: Option<Stamp>,
    /// The highest priority it was added with since it was last handed out.
    pub(crate) priority: i32,
    /// The sequence number of its live entry in the fair order; [`NOT_QUEUED`] while it is
    /// processed (and always in the first-in-first-out order).
    pub(crate) seq: u64,
}

/// A delayed item's place in the timeline, and the priority it is to be added with.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Delayed {
    pub(crate) at: Instant,
    pub(crate) seq: u64,
    pub(crate) priority: i32,
}

pub(crate) struct State<T> {
    /// Items to hand out, in order.
    pub(crate) order: Order<T>,
    /// Items waiting (queued, or to be queued again when their processing is done).
    pub(crate) dirty: HashMap<T, Waiting, RandomState>,
    /// Items being processed.
    pub(crate) processing: HashMap<T, Processing, RandomState>,
    /// Delayed items by deadline (the sequence number breaks ties).
    pub(crate) timeline: BTreeMap<(Instant, u64), T>,
    /// Each delayed item's place in the timeline.
    pub(crate) delayed: HashMap<T, Delayed, RandomState>,
    pub(crate) next_seq: u64,
    pub(crate) shutting_down: bool,
    /// A drain has completed: nothing more is handed out.
    pub(crate) drained: bool,
    /// How many times `shut_down` was called: a drain that began before the last call
    /// returns without waiting any longer.
    pub(crate) shut_downs: u64,
    pub(crate) sampler: Sampler,
    pub(crate) numbers: Numbers,
}

impl<T: Clone + Eq + Hash> State<T> {
    /// An empty state handing items out in `order`, timing them if `timed`.
    pub(crate) fn new(order: Order<T>, timed: bool) -> Self {
        Self {
            order,
            dirty: HashMap::default(),
            processing: HashMap::default(),
            timeline: BTreeMap::new(),
            delayed: HashMap::default(),
            next_seq: 0,
            shutting_down: false,
            drained: false,
            shut_downs: 0,
            sampler: Sampler::new(timed),
            numbers: Numbers::default(),
        }
    }

    /// Adds `item` at `priority` (an item waiting already is raised to it, never lowered);
    /// whether an item was queued for a worker now.
    pub(crate) fn add(&mut self, item: T, priority: i32) -> bool {
        if self.shutting_down {
            return false;
        }
        if let Some(waiting) = self.dirty.get(&item) {
            if self.order.is_fair() && priority > waiting.priority {
                self.raise(&item, priority);
            }
            return false;
        }
        self.add_new(item, priority)
    }

    /// Raises waiting `item` to `priority` if that is higher than its own (in the fair order).
    pub(crate) fn raise(&mut self, item: &T, priority: i32) {
        let Order::Fair(fair) = &mut self.order else {
            return;
        };
        let Some(waiting) = self.dirty.get_mut(item) else {
            return;
        };
        if priority <= waiting.priority {
            return;
        }
        if waiting.seq == NOT_QUEUED {
            // Being processed: queued at its done with this priority.
            waiting.priority = priority;
            return;
        }
        let (seq, crowded) = fair.raise(item.clone(), waiting.priority, priority);
        (waiting.seq, waiting.priority) = (seq, priority);
        if let Some(crowded) = crowded {
            let dirty = &self.dirty;
            fair.compact(crowded, |item, seq| {
                dirty.get(item).is_some_and(|w| w.seq == seq)
            });
        }
    }

    /// [`add`](Self::add) for an item known not to be waiting, the queue not shutting down.
    pub(crate) fn add_new(&mut self, item: T, priority: i32) -> bool {
        let priority = if self.order.is_fair() {
            priority
        } else {
            DEFAULT_PRIORITY
        };
        let queued = !self.processing.contains_key(&item);
        let seq = if queued {
            self.order.push(item.clone(), priority)
        } else {
            NOT_QUEUED
        };
        self.numbers.adds += 1;
        let stamp = self.sampler.sample();
        let waiting = Waiting {
            stamp,
            priority,
            seq,
        };
        self.dirty.insert(item, waiting);
        queued
    }

    /// The priority a requeue of `item` keeps: the highest it has in the queue (being
    /// processed, waiting or delayed), or the default for an item the queue does not hold.
    pub(crate) fn priority_of(&self, item: &T) -> i32 {
        if !self.order.is_fair() {
            return DEFAULT_PRIORITY;
        }
        let processing = self.processing.get(item).map(|p| p.priority);
        let waiting = self.dirty.get(item).map(|w| w.priority);
        let delayed = self.delayed.get(item).map(|d| d.priority);
        [processing, waiting, delayed]
            .into_iter()
            .flatten()
            .max()
            .unwrap_or(DEFAULT_PRIORITY)
    }

    /// Delays `item` until `deadline` at `priority`: an item delayed already keeps the earlier
    /// deadline and the higher priority. Whether the timeline changed.
    pub(crate) fn delay(&mut self, item: T, deadline: Instant, priority: i32) -> bool {
        if let Some(delayed) = self.delayed.get_mut(&item) {
            delayed.priority = delayed.priority.max(priority);
            if delayed.at <= deadline {
                return false;
            }
            let priority = delayed.priority;
            self.timeline.remove(&(delayed.at, delayed.seq));
            return self.schedule(item, deadline, priority);
        }
        self.schedule(item, deadline, priority)
    }

    /// Puts `item` on the timeline at `at`.
    fn schedule(&mut self, item: T, at: Instant, priority: i32) -> bool {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.timeline.insert((at, seq), item.clone());
        let delayed = Delayed { at, seq, priority };
        self.delayed.insert(item, delayed);
        true
    }

    /// Moves the delayed items whose deadline has passed into the queue; the next deadline.
    pub(crate) fn promote(&mut self, now: Instant) -> Option<Instant> {
        while let Some((&(at, seq), _)) = self.timeline.first_key_value() {
            if at > now {
                return Some(at);
            }
            let item = self
                .timeline
                .remove(&(at, seq))
                .expect("the first entry is there");
            let priority = self
                .delayed
                .remove(&item)
                .map_or(DEFAULT_PRIORITY, |d| d.priority);
            self.add(item, priority);
        }
        None
    }

    /// Takes the next queued item off the queue and marks it processing (timed from `now` if
    /// its add was timed; `now` is read here if not given).
    pub(crate) fn take(&mut self, now: Option<Instant>) -> Option<T> {
        let dirty = &self.dirty;
        let item = self
            .order
            .pop(|item, seq| dirty.get(item).is_some_and(|w| w.seq == seq))?;
        let waiting = self.dirty.remove(&item).expect("a queued item is waiting");
        let started = match waiting.stamp {
            Some(added) => {
                let now = now.unwrap_or_else(Instant::now);
                self.numbers.timed += 1;
                self.numbers
                    .queue_duration
                    .observe(now.saturating_duration_since(added.at), added.weight.into());
                Started::Timed(Stamp {
                    at: now,
                    weight: added.weight,
                })
            }
            None => Started::Untimed,
        };
        let priority = waiting.priority;
        self.processing
            .insert(item.clone(), Processing { started, priority });
        Some(item)
    }

    /// Ends `item`'s processing and queues it if it was added meanwhile: whether it was.
    /// Leaves the state unchanged if the tenant function panics.
    pub(crate) fn done(&mut self, item: &T) -> bool {
        let requeued = match self.dirty.get_mut(item) {
            Some(waiting) if self.processing.contains_key(item) => {
                waiting.seq = self.order.push(item.clone(), waiting.priority);
                true
            }
            _ => false,
        };
        if let Some(processing) = self.processing.remove(item)
            && let Started::Timed(stamp) = processing.started
        {
            let took = Instant::now().saturating_duration_since(stamp.at);
            self.numbers
                .work_duration
                .observe(took, stamp.weight.into());
        }
        requeued
    }

    /// Stops taking items and drops the delayed ones.
    pub(crate) fn stop(&mut self) {
        self.shutting_down = true;
        self.timeline.clear();
        self.delayed.clear();
    }
}
