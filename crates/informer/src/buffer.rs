//! A consumer's bounded buffer: notifications in order while the consumer keeps up, one entry
//! per changed key (the version it saw and the latest) once it falls behind.

use std::collections::{HashMap, VecDeque};
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::handler::Event;
use crate::registration::ListenerState;

/// Notifications handed to every consumer at once: one shared, read-only buffer, so sending a
/// change to N consumers neither clones its objects' `Arc`s N times nor has N threads contend
/// on their reference counts.
pub(crate) type Batch<K> = Arc<[Notification<K>]>;

/// One change, as queued for the consumers.
pub(crate) struct Notification<K> {
    pub(crate) event: Event<K>,
    /// For a deletion, the version the cache held (what every consumer saw last): the base a
    /// coalesced consumer's next update starts from if the key comes back.
    prior: Option<Arc<K>>,
}

impl<K> Notification<K> {
    pub(crate) fn add(key: Arc<str>, obj: Arc<K>, initial: bool) -> Self {
        Self {
            event: Event::Add { key, obj, initial },
            prior: None,
        }
    }

    pub(crate) fn update(key: Arc<str>, old: Arc<K>, new: Arc<K>) -> Self {
        Self {
            event: Event::Update { key, old, new },
            prior: None,
        }
    }

    pub(crate) fn delete(
        key: Arc<str>,
        obj: Arc<K>,
        final_state_unknown: bool,
        prior: Arc<K>,
    ) -> Self {
        Self {
            event: Event::Delete {
                key,
                obj,
                final_state_unknown,
            },
            prior: Some(prior),
        }
    }

    pub(crate) fn is_initial(&self) -> bool {
        matches!(self.event, Event::Add { initial: true, .. })
    }
}

/// A run of notifications waiting in a consumer's buffer: `batch[next..end]`.
pub(crate) struct Segment<K> {
    pub(crate) batch: Batch<K>,
    pub(crate) next: usize,
    pub(crate) end: usize,
    pub(crate) since: std::time::Instant,
    /// A late consumer's snapshot: the cache's current state, not old versions, so not held
    /// against the bound.
    pub(crate) exempt: bool,
}

/// What a coalesced key's consumer will see.
enum Latest<K> {
    Present(Arc<K>),
    Deleted {
        obj: Arc<K>,
        final_state_unknown: bool,
        /// The version the cache held when the key was deleted.
        prior: Arc<K>,
    },
}

/// One key a lagging consumer has not seen the latest of.
struct Coalesced<K> {
    /// The version the consumer saw last (`None`: it does not know the key).
    base: Option<Arc<K>>,
    latest: Latest<K>,
    /// An add from the initial state is part of it.
    initial: bool,
    /// Initial adds taken into this entry, handled when it is.
    initials: usize,
    since: std::time::Instant,
}

impl<K> Coalesced<K> {
    /// The notifications this entry amounts to: none, one, or for a key the consumer knew
    /// that changed and then went away, the update from the version it saw to the last one
    /// cached, then the deletion — so that a consumer judging objects (a filter) sees the
    /// state the deletion starts from, never a deletion of a version it did not see.
    fn into_events(self, key: Arc<str>) -> Option<(Event<K>, Option<Event<K>>)> {
        match (self.base, self.latest) {
            (None, Latest::Present(obj)) => Some((
                Event::Add {
                    key,
                    obj,
                    initial: self.initial,
                },
                None,
            )),
            (Some(old), Latest::Present(new)) => Some((Event::Update { key, old, new }, None)),
            (
                Some(old),
                Latest::Deleted {
                    obj,
                    final_state_unknown,
                    prior,
                },
            ) => {
                let delete = Event::Delete {
                    key: Arc::clone(&key),
                    obj,
                    final_state_unknown,
                };
                if Arc::ptr_eq(&old, &prior) {
                    Some((delete, None))
                } else {
                    let update = Event::Update {
                        key,
                        old,
                        new: prior,
                    };
                    Some((update, Some(delete)))
                }
            }
            (None, Latest::Deleted { .. }) => None,
        }
    }
}

/// A consumer's buffer: notifications in order up to its bound, then one entry per key.
pub(crate) struct Buffer<K> {
    capacity: usize,
    pub(crate) segments: VecDeque<Segment<K>>,
    /// Notifications in `segments`.
    pub(crate) queued: usize,
    /// Of which the snapshot's, not held against the bound.
    pub(crate) exempt: usize,
    /// Behind its bound: every new notification goes to `coalesced` until it has caught up.
    coalescing: bool,
    order: VecDeque<Arc<str>>,
    coalesced: HashMap<Arc<str>, Coalesced<K>>,
    /// The second notification of a coalesced key (see [`Coalesced::into_events`]), handed out
    /// next.
    then: Option<(Event<K>, std::time::Instant)>,
    /// Takes nothing more: removed, stopped or dropped.
    pub(crate) closed: bool,
}

/// What a consumer takes out of its buffer.
pub(crate) enum Taken<K> {
    /// Notifications in order, shared with the other consumers.
    Run(Batch<K>, Range<usize>),
    /// One coalesced key, and the initial adds it stands for.
    One(Event<K>, usize),
    /// Nothing now.
    Empty,
    /// Nothing ever again: closed and drained.
    Finished,
}

impl<K> Buffer<K> {
    /// A buffer of `capacity` holding `initial` as initial adds. The snapshot is the cache's
    /// current state, not old versions: it is not held against the bound, which later
    /// notifications are.
    pub(crate) fn with_snapshot(capacity: usize, initial: Vec<(Arc<str>, Arc<K>)>) -> Self {
        let mut buffer = Self::new(capacity);
        if initial.is_empty() {
            return buffer;
        }
        let snapshot: Batch<K> = initial
            .into_iter()
            .map(|(key, obj)| Notification::add(key, obj, true))
            .collect();
        let len = snapshot.len();
        buffer.segments.push_back(Segment {
            batch: snapshot,
            next: 0,
            end: len,
            since: std::time::Instant::now(),
            exempt: true,
        });
        buffer.queued = len;
        buffer.exempt = len;
        buffer
    }

    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            capacity,
            segments: VecDeque::new(),
            queued: 0,
            exempt: 0,
            coalescing: false,
            order: VecDeque::new(),
            coalesced: HashMap::new(),
            then: None,
            closed: false,
        }
    }

    pub(crate) fn buffered(&self) -> usize {
        self.queued + self.coalesced.len() + usize::from(self.then.is_some())
    }

    pub(crate) fn push(&mut self, batch: &Batch<K>, state: &ListenerState) {
        let now = std::time::Instant::now();
        let len = batch.len();
        let mut from = 0;
        if !self.coalescing {
            // What the consumer has taken out and not started yet counts against the bound too.
            let in_hand = state.in_hand.load(Ordering::Acquire);
            let room = self
                .capacity
                .saturating_sub(self.queued - self.exempt + in_hand);
            let fits = len.min(room);
            if fits > 0 {
                self.segments.push_back(Segment {
                    batch: Arc::clone(batch),
                    next: 0,
                    end: fits,
                    since: now,
                    exempt: false,
                });
                self.queued += fits;
            }
            if fits == len {
                return;
            }
            from = fits;
            self.coalescing = true;
            state.overflows.fetch_add(1, Ordering::Relaxed);
        }
        state.coalesced.fetch_add(len - from, Ordering::Relaxed);
        for n in &batch[from..] {
            self.absorb(n, now);
        }
    }

    /// Takes one notification into its key's entry.
    fn absorb(&mut self, n: &Notification<K>, now: std::time::Instant) {
        let initial = usize::from(n.is_initial());
        let key = match &n.event {
            Event::Add { key, .. } | Event::Update { key, .. } | Event::Delete { key, .. } => key,
        };
        let latest = match &n.event {
            Event::Add { obj, .. } | Event::Update { new: obj, .. } => {
                Latest::Present(Arc::clone(obj))
            }
            Event::Delete {
                obj,
                final_state_unknown,
                ..
            } => Latest::Deleted {
                obj: Arc::clone(obj),
                final_state_unknown: *final_state_unknown,
                prior: n.prior.clone().unwrap_or_else(|| Arc::clone(obj)),
            },
        };
        if let Some(entry) = self.coalesced.get_mut(&**key) {
            entry.latest = latest;
            entry.initials += initial;
            if let Event::Add { initial, .. } = n.event {
                entry.initial = initial;
            }
            return;
        }
        let (base, initial_flag) = match &n.event {
            Event::Add { initial, .. } => (None, *initial),
            Event::Update { old, .. } => (Some(Arc::clone(old)), false),
            Event::Delete { obj, .. } => (
                Some(n.prior.clone().unwrap_or_else(|| Arc::clone(obj))),
                false,
            ),
        };
        self.order.push_back(Arc::clone(key));
        self.coalesced.insert(
            Arc::clone(key),
            Coalesced {
                base,
                latest,
                initial: initial_flag,
                initials: initial,
                since: now,
            },
        );
    }

    /// Takes up to `max` notifications in order, or one coalesced key. Initial adds of keys
    /// that came to nothing are returned in `dropped_initials`, handled at once; `since` is set
    /// to when what is taken was written.
    pub(crate) fn take(
        &mut self,
        max: usize,
        dropped_initials: &mut usize,
        since: &mut Option<std::time::Instant>,
    ) -> Taken<K> {
        if let Some((event, at)) = self.then.take() {
            *since = Some(at);
            return Taken::One(event, 0);
        }
        if let Some(segment) = self.segments.front_mut() {
            let start = segment.next;
            let end = segment.end.min(start + max.max(1));
            segment.next = end;
            let batch = Arc::clone(&segment.batch);
            *since = Some(segment.since);
            if segment.exempt {
                self.exempt -= end - start;
            }
            if end == segment.end {
                self.segments.pop_front();
            }
            self.queued -= end - start;
            return Taken::Run(batch, start..end);
        }
        while let Some(key) = self.order.pop_front() {
            let Some(entry) = self.coalesced.remove(&key) else {
                continue;
            };
            let initials = entry.initials;
            let at = entry.since;
            match entry.into_events(key) {
                Some((event, then)) => {
                    self.then = then.map(|then| (then, at));
                    *since = Some(at);
                    return Taken::One(event, initials);
                }
                None => *dropped_initials += initials,
            }
        }
        // Caught up: back to one notification per change.
        self.coalescing = false;
        if self.closed {
            Taken::Finished
        } else {
            Taken::Empty
        }
    }

    /// Drops everything buffered and takes nothing more.
    pub(crate) fn close_and_clear(&mut self) {
        self.closed = true;
        self.segments.clear();
        self.queued = 0;
        self.exempt = 0;
        self.order.clear();
        self.coalesced.clear();
        self.then = None;
    }

    pub(crate) fn oldest(&self) -> Option<std::time::Instant> {
        let segment = self.segments.front().map(|s| s.since);
        let key = self
            .order
            .iter()
            .find_map(|k| self.coalesced.get(k).map(|c| c.since));
        match (segment, key) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(k: &str) -> Arc<str> {
        Arc::from(k)
    }

    /// A model consumer: applies what it receives to a map, as a controller's view would.
    fn apply(view: &mut std::collections::BTreeMap<String, u32>, event: &Event<u32>) {
        match event {
            Event::Add { key, obj, .. } => {
                assert!(
                    view.insert(key.to_string(), **obj).is_none(),
                    "add of a known key {key}"
                );
            }
            Event::Update { key, old, new } => {
                let seen = view.insert(key.to_string(), **new);
                assert_eq!(seen, Some(**old), "update of {key} from a version not seen");
            }
            Event::Delete { key, .. } => {
                assert!(
                    view.remove(&**key).is_some(),
                    "delete of an unknown key {key}"
                );
            }
        }
    }

    fn drain(buffer: &mut Buffer<u32>, view: &mut std::collections::BTreeMap<String, u32>) {
        let mut dropped = 0;
        loop {
            match buffer.take(7, &mut dropped, &mut None) {
                Taken::Run(batch, range) => batch[range].iter().for_each(|n| apply(view, &n.event)),
                Taken::One(event, _) => apply(view, &event),
                Taken::Empty | Taken::Finished => return,
            }
        }
    }

    use proptest::prelude::*;

    /// Operations on a model cache of keys 0..8 with version numbers.
    fn ops() -> impl Strategy<Value = Vec<(u8, u8, bool)>> {
        prop::collection::vec((0u8..8, 0u8..3, any::<bool>()), 1..200)
    }

    proptest! {
        /// Whatever the bound and however far behind the consumer is, what it receives is a
        /// consistent stream (every update starts from the version it saw, no add of a known
        /// key, no delete of an unknown one), and once drained its view equals the cache.
        #[test]
        fn a_lagging_consumer_ends_equal_to_the_cache(capacity in 1usize..20, ops in ops()) {
            let state = ListenerState::default();
            let mut buffer = Buffer::new(capacity);
            let mut cache = std::collections::BTreeMap::<String, u32>::new();
            let mut view = std::collections::BTreeMap::<String, u32>::new();
            let mut version = 0u32;
            let mut pending = Vec::new();
            for (k, op, consume) in ops {
                let k = format!("k{k}");
                version += 1;
                let n = match (op, cache.get(&k).copied()) {
                    (0 | 1, None) => Notification::add(key(&k), Arc::new(version), false),
                    (0 | 1, Some(old)) => Notification::update(key(&k), Arc::new(old), Arc::new(version)),
                    (_, Some(old)) => Notification::delete(key(&k), Arc::new(old), false, Arc::new(old)),
                    (_, None) => continue,
                };
                match &n.event {
                    Event::Delete { .. } => { cache.remove(&k); }
                    e => { cache.insert(k.clone(), **e.object()); }
                }
                pending.push(n);
                if consume || pending.len() > 5 {
                    let batch: Batch<u32> = pending.drain(..).collect();
                    buffer.push(&batch, &state);
                    prop_assert!(buffer.queued <= capacity);
                    if consume {
                        // Takes a little only: stays behind.
                        let mut dropped = 0;
                        match buffer.take(1, &mut dropped, &mut None) {
                            Taken::Run(b, r) => b[r].iter().for_each(|n| apply(&mut view, &n.event)),
                            Taken::One(e, _) => apply(&mut view, &e),
                            Taken::Empty | Taken::Finished => {}
                        }
                    }
                }
            }
            let batch: Batch<u32> = pending.drain(..).collect();
            buffer.push(&batch, &state);
            drain(&mut buffer, &mut view);
            prop_assert_eq!(view, cache);
            prop_assert!(!buffer.coalescing, "back to normal delivery once caught up");
            prop_assert_eq!(buffer.coalesced.len(), 0);
        }
    }

    #[test]
    fn an_add_and_delete_while_behind_yields_nothing_and_the_rest_coalesces() {
        let state = ListenerState::default();
        let mut buffer = Buffer::new(1);
        let batch: Batch<u32> = vec![
            Notification::add(key("a"), Arc::new(1), false),
            Notification::add(key("b"), Arc::new(2), false),
            Notification::update(key("b"), Arc::new(2), Arc::new(3)),
            Notification::update(key("b"), Arc::new(3), Arc::new(4)),
            Notification::add(key("c"), Arc::new(5), false),
            Notification::delete(key("c"), Arc::new(5), false, Arc::new(5)),
        ]
        .into();
        buffer.push(&batch, &state);
        assert_eq!(buffer.queued, 1);
        assert_eq!(state.coalesced.load(Ordering::Relaxed), 5);
        assert_eq!(state.overflows.load(Ordering::Relaxed), 1);
        let mut dropped = 0;
        let mut got = Vec::new();
        loop {
            match buffer.take(10, &mut dropped, &mut None) {
                Taken::Run(b, r) => got.extend(b[r].iter().map(|n| n.event.clone())),
                Taken::One(e, _) => got.push(e),
                _ => break,
            }
        }
        let described: Vec<String> = got
            .iter()
            .map(|e| match e {
                Event::Add { key, obj, .. } => format!("add {key} {obj}"),
                Event::Update { key, old, new } => format!("update {key} {old}->{new}"),
                Event::Delete { key, obj, .. } => format!("delete {key} {obj}"),
            })
            .collect();
        // b was added while behind: its add carries the latest version; c came and went.
        assert_eq!(described, ["add a 1", "add b 4"]);
    }
}
