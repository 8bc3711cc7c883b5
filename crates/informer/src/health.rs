//! How an informer is doing: its health (readiness and liveness, with the problems found) and
//! its stats, and what it counts about the input it refused.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use informer_fifo::Queue;
use informer_reflector::Availability;
use informer_store::{Indexer, Store};
use parking_lot::Mutex;

use crate::informer::SharedIndexInformer;
use crate::registration::HandlerRegistration;

/// When [`SharedIndexInformer::health`] reports a stall.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HealthOptions {
    /// Changes waiting (queued, or one being processed) with none processed for this long, as
    /// seen across health checks: the pop loop is stuck (default 60 s).
    pub stalled_after: Duration,
    /// No watch open for this long: the reflector cannot get back to the server (default 60 s,
    /// twice the default backoff cap).
    pub watch_down_after: Duration,
}

impl Default for HealthOptions {
    fn default() -> Self {
        Self {
            stalled_after: Duration::from_secs(60),
            watch_down_after: Duration::from_secs(60),
        }
    }
}

/// Something wrong with a running informer (see [`SharedIndexInformer::health`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Problem {
    /// The informer has stopped.
    Stopped,
    /// A consumer stopped while the informer runs (its panic policy stopped it).
    HandlerStopped {
        /// The consumer's registration number.
        handler: u64,
    },
    /// Changes are waiting and none has been processed for a while.
    NoProgress {
        /// Keys queued (not counting a batch being processed).
        queued: usize,
        /// Since a health check last saw a change processed (or the start).
        stalled_for: Duration,
    },
    /// No watch has been open for a while.
    WatchDown {
        /// Since the last watch ended (or the start).
        down_for: Duration,
    },
    /// The server does not serve the resource (its lists are answered `404 NotFound`: a CRD
    /// not installed yet, or deleted); the informer waits for it, listing every few seconds.
    /// Not a liveness problem: restarting the program would not bring the resource.
    NotServed {
        /// Since the first list answered so.
        not_served_for: Duration,
    },
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Stopped => write!(f, "stopped"),
            Self::HandlerStopped { handler } => write!(f, "handler {handler} stopped"),
            Self::NoProgress {
                queued,
                stalled_for,
            } => write!(
                f,
                "{queued} keys queued and nothing processed for {stalled_for:.1?}"
            ),
            Self::WatchDown { down_for } => write!(f, "no watch open for {down_for:.1?}"),
            Self::NotServed { not_served_for } => write!(
                f,
                "the server has not served the resource for {not_served_for:.1?}"
            ),
        }
    }
}

/// An informer's health (see [`SharedIndexInformer::health`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Health {
    /// The informer's name.
    pub name: String,
    /// Whether it has synced.
    pub synced: bool,
    /// What is wrong, if anything.
    pub problems: Vec<Problem>,
}

impl Health {
    /// Nothing is wrong (a liveness check). An informer waiting for a resource the server
    /// does not serve ([`Problem::NotServed`]) is live, and so is one that stopped because
    /// its resource went away (told to: `with_stop_when_not_served`): a restart would not
    /// bring the resource back.
    pub fn is_live(&self) -> bool {
        let not_served = self.is_not_served();
        self.problems.iter().all(|p| match p {
            Problem::NotServed { .. } => true,
            Problem::Stopped => not_served,
            _ => false,
        })
    }

    /// Synced, running and nothing is wrong (a readiness check); a resource no longer served,
    /// whose objects the cache has deleted, does not make it unready (see
    /// [`is_live`](Self::is_live)).
    pub fn is_ready(&self) -> bool {
        self.synced && self.is_live() && !self.problems.contains(&Problem::Stopped)
    }

    /// Whether the server does not serve the informer's resource now.
    pub fn is_not_served(&self) -> bool {
        self.problems
            .iter()
            .any(|p| matches!(p, Problem::NotServed { .. }))
    }
}

impl fmt::Display for Health {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {}",
            self.name,
            if self.synced { "synced" } else { "not synced" }
        )?;
        for problem in &self.problems {
            write!(f, "; {problem}")?;
        }
        Ok(())
    }
}

/// A snapshot of an informer, from [`SharedIndexInformer::stats`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct InformerStats {
    /// The informer's name.
    pub name: String,
    /// Whether it has been started.
    pub started: bool,
    /// Whether it has synced.
    pub synced: bool,
    /// Whether it has stopped.
    pub stopped: bool,
    /// Objects in its cache.
    pub objects: usize,
    /// Each index, by name, with its number of distinct values.
    pub indexes: Vec<(String, usize)>,
    /// The queue's counts (zero before the informer runs).
    pub queue: informer_fifo::QueueCounts,
    /// Deltas refused ([`SharedIndexInformer::refused_deltas`]).
    pub refused_deltas: u64,
    /// The same by reason, every reason listed ([`SharedIndexInformer::refused_deltas_by`]).
    pub refused_by_reason: Vec<(RefusalReason, u64)>,
    /// Panics caught on the informer's own path ([`SharedIndexInformer::caught_panics`]).
    pub caught_panics: u64,
    /// Whether the server serves its resource, as its reflector's last list found
    /// ([`SharedIndexInformer::availability`]).
    pub availability: Availability,
    /// Whether the server filtered its last list by its shard set
    /// ([`SharedIndexInformer::server_filtering`]).
    pub server_filtering: informer_reflector::ServerFiltering,
    /// Its consumers now, each with its counters (buffered, delivered, coalesced, lag,
    /// panics).
    pub handlers: Vec<HandlerRegistration>,
}

/// Why the queue or the cache refused an object (the label of
/// [`SharedIndexInformer::refused_deltas_by`] and of the `informer_refused_deltas_total`
/// metric).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RefusalReason {
    /// The key function failed or panicked (the queue's, or the cache's).
    Key,
    /// The transform failed or panicked.
    Transform,
    /// An index function failed or panicked.
    Index,
    /// The queue or the cache refused it for another reason (a store of your own).
    Other,
    /// Applying the change panicked outside the user functions caught where they run.
    Panic,
}

impl RefusalReason {
    /// Every reason, in a fixed order.
    pub const ALL: [Self; 5] = [
        Self::Key,
        Self::Transform,
        Self::Index,
        Self::Other,
        Self::Panic,
    ];

    /// The reason as a metric label: `key`, `transform`, `index`, `other`, `panic`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Key => "key",
            Self::Transform => "transform",
            Self::Index => "index",
            Self::Other => "other",
            Self::Panic => "panic",
        }
    }

    pub(crate) fn of_queue(error: &informer_fifo::Error) -> Self {
        match error {
            informer_fifo::Error::Key(_) => Self::Key,
            informer_fifo::Error::Transform { .. } => Self::Transform,
            _ => Self::Other,
        }
    }

    pub(crate) fn of_cache(error: &informer_store::Error) -> Self {
        match error {
            informer_store::Error::Key(_) => Self::Key,
            informer_store::Error::IndexFunc { .. } => Self::Index,
            _ => Self::Other,
        }
    }
}

/// What an informer counts about the input it could not take.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    /// Refusals, by [`RefusalReason`] (in the order of [`RefusalReason::ALL`]).
    refused: [AtomicU64; RefusalReason::ALL.len()],
    pub(crate) panics: AtomicU64,
    /// Changes processed (applied and distributed), and whether one is being processed now.
    pub(crate) processed: AtomicU64,
    pub(crate) processing: AtomicBool,
    /// The processed count a health check last saw change, and when.
    progress_seen: Mutex<Option<(u64, tokio::time::Instant)>>,
    /// When the informer started running.
    pub(crate) started_at: Mutex<Option<tokio::time::Instant>>,
}

impl Counters {
    pub(crate) fn refuse(&self, reason: RefusalReason) {
        self.refused[reason as usize].fetch_add(1, Ordering::Relaxed);
    }
}

impl<K> SharedIndexInformer<K>
where
    K: Send + Sync + 'static,
{
    /// Objects (or versions of objects) the queue or the cache refused so far: a key function,
    /// index function or transform that failed or panicked on them. Each was logged with the
    /// informer's name and the object's key; none stops the informer, and none leaves a
    /// superseded version in the cache as if current (see
    /// [`process_deltas`](crate::process_deltas) and [`Queue`]).
    pub fn refused_deltas(&self) -> u64 {
        RefusalReason::ALL
            .iter()
            .map(|&r| self.refused_deltas_by(r))
            .sum()
    }

    /// [`refused_deltas`](Self::refused_deltas) for one reason.
    pub fn refused_deltas_by(&self, reason: RefusalReason) -> u64 {
        self.counters.refused[reason as usize].load(Ordering::Relaxed)
    }

    /// Panics caught in user code on the informer's own path (key, index, transform and
    /// resource-version functions) so far; each was logged. Handler panics are counted per
    /// handler ([`HandlerRegistration::panics`]).
    pub fn caught_panics(&self) -> u64 {
        self.counters.panics.load(Ordering::Relaxed)
    }

    /// Whether the server serves the informer's resource, as its reflector's last list found:
    /// [`Availability::Unknown`] before the first list answers (and before the run),
    /// [`Availability::NotServed`] while its lists are answered `404 NotFound` (the informer
    /// waits for the resource; see `informer_reflector::Reflector`).
    pub fn availability(&self) -> Availability {
        self.state
            .lock()
            .life
            .reflector()
            .map_or(Availability::Unknown, |r| r.availability())
    }

    /// Whether the informer is synced and making progress, for readiness and liveness checks.
    ///
    /// Problems: it stopped; a consumer stopped while it runs (its panic policy); changes are
    /// waiting (queued or being processed) and none has been processed for
    /// [`stalled_after`](HealthOptions::stalled_after), as seen across health checks; no
    /// watch has been open for [`watch_down_after`](HealthOptions::watch_down_after); the
    /// server does not serve the resource ([`Problem::NotServed`], instead of the watch being
    /// down; not a liveness problem). An informer not started yet has none (and is not
    /// synced).
    pub fn health(&self, options: &HealthOptions) -> Health
    where
        K: Send + Sync + 'static,
    {
        let mut problems = Vec::new();
        let now = tokio::time::Instant::now();
        if self.is_stopped() {
            problems.push(Problem::Stopped);
            problems.extend(self.not_served_for(now));
        } else if let Some(started) = *self.counters.started_at.lock() {
            problems.extend(
                self.processor
                    .failed()
                    .into_iter()
                    .map(|handler| Problem::HandlerStopped { handler }),
            );
            let queued = self.queue.lock().as_ref().map_or(0, |q| q.len());
            let busy = self.counters.processing.load(Ordering::Relaxed);
            let processed = self.counters.processed.load(Ordering::Relaxed);
            let since = {
                let mut seen = self.counters.progress_seen.lock();
                match *seen {
                    Some((count, at)) if count == processed => at,
                    _ => {
                        // Progress since the last check (or the first check): from the start.
                        let at = if seen.is_none() { started } else { now };
                        *seen = Some((processed, at));
                        at
                    }
                }
            };
            let stalled_for = now.saturating_duration_since(since);
            if (queued > 0 || busy) && stalled_for >= options.stalled_after {
                problems.push(Problem::NoProgress {
                    queued,
                    stalled_for,
                });
            }
            let down = self
                .state
                .lock()
                .life
                .reflector()
                .and_then(|r| r.watch_down_since());
            if let Some(not_served) = self.not_served_for(now) {
                // No watch is expected then: the informer waits, it is not stuck.
                problems.push(not_served);
            } else if let Some(since) = down {
                let down_for = now.saturating_duration_since(since);
                if down_for >= options.watch_down_after {
                    problems.push(Problem::WatchDown { down_for });
                }
            }
        }
        Health {
            name: self.name.to_string(),
            synced: self.has_synced(),
            problems,
        }
    }

    /// [`Problem::NotServed`], if the server does not serve the resource (as of `now`).
    fn not_served_for(&self, now: tokio::time::Instant) -> Option<Problem> {
        let since = self.state.lock().life.reflector()?.not_served_since()?;
        Some(Problem::NotServed {
            not_served_for: now.saturating_duration_since(since),
        })
    }

    /// A snapshot of the informer's state and counters, for metrics and health checks: cheap
    /// enough for every scrape (it reads counters, and counts each index's values).
    pub fn stats(&self) -> InformerStats
    where
        K: Send + Sync + 'static,
    {
        let indexes = self
            .indexer
            .get_indexers()
            .keys()
            .map(|name| {
                let values = self.indexer.list_index_func_values(name).len();
                (name.clone(), values)
            })
            .collect();
        InformerStats {
            name: self.name.to_string(),
            started: self.has_started(),
            synced: self.has_synced(),
            stopped: self.is_stopped(),
            objects: self.indexer.len(),
            indexes,
            queue: self
                .queue
                .lock()
                .as_ref()
                .map(|q| q.counts())
                .unwrap_or_default(),
            refused_deltas: self.refused_deltas(),
            refused_by_reason: RefusalReason::ALL
                .iter()
                .map(|&r| (r, self.refused_deltas_by(r)))
                .collect(),
            caught_panics: self.caught_panics(),
            availability: self.availability(),
            server_filtering: self.server_filtering(),
            handlers: self.processor.registrations(),
        }
    }
}
