//! The runner: one replica's membership and shard Leases, worked in a pass every retry period.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use informer_shard::ShardRange;
use parking_lot::Mutex;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::pass::Run;
use super::{ShardConfig, ShardStats, ShardStatus, ShardTerm};
use crate::attempt::record_lease;
use crate::elector::ConfigError;
use crate::store::LeaseStore;

/// One replica in a shard assignment (see the [module docs](crate::shards)). Cheap to clone:
/// clones are the same replica. [`run`](Self::run) it once.
#[derive(Clone)]
pub struct ShardRunner {
    pub(super) inner: Arc<Inner>,
}

pub(super) struct Inner {
    pub(super) store: Box<dyn LeaseStore>,
    pub(super) config: ShardConfig,
    pub(super) identity: Arc<str>,
    pub(super) record_lease: Duration,
    ranges: Vec<ShardRange>,
    status: watch::Sender<ShardStatus>,
    /// The current term of each shard owned.
    terms: Mutex<BTreeMap<u32, ShardTerm>>,
    /// Told when a term's last clone is dropped.
    pub(super) acked: Arc<Notify>,
    started: AtomicU64,
    pub(super) handed_off: AtomicU64,
    pub(super) lost: AtomicU64,
    pub(super) running: AtomicBool,
}

impl fmt::Debug for ShardRunner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShardRunner")
            .field("store", &self.inner.store.describe())
            .field("config", &self.inner.config)
            .field("status", &*self.inner.status.borrow())
            .finish()
    }
}

impl ShardRunner {
    /// A replica of the assignment `config` describes, on the Leases of `store`.
    pub fn new(store: impl LeaseStore, config: ShardConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        let ranges = ShardRange::split(config.shards).map_err(|_| ConfigError::NoShards)?;
        Ok(Self {
            inner: Arc::new(Inner {
                store: Box::new(store),
                identity: config.identity.as_str().into(),
                record_lease: record_lease(config.timings.lease_duration),
                ranges,
                config,
                status: watch::Sender::new(ShardStatus::default()),
                terms: Mutex::default(),
                acked: Arc::default(),
                started: AtomicU64::new(0),
                handed_off: AtomicU64::new(0),
                lost: AtomicU64::new(0),
                running: AtomicBool::new(false),
            }),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &ShardConfig {
        &self.inner.config
    }

    /// What the replica knows now.
    pub fn status(&self) -> ShardStatus {
        self.inner.status.borrow().clone()
    }

    /// The status as it changes: follow `owned` to learn of terms starting and ending.
    pub fn subscribe(&self) -> watch::Receiver<ShardStatus> {
        self.inner.status.subscribe()
    }

    /// The current term on `shard`, if this replica owns it. Hold it while working on the
    /// shard (see [`ShardTerm`]).
    pub fn term(&self, shard: u32) -> Option<ShardTerm> {
        self.inner.terms.lock().get(&shard).cloned()
    }

    /// The current terms, by shard.
    pub fn terms(&self) -> Vec<ShardTerm> {
        self.inner.terms.lock().values().cloned().collect()
    }

    /// Counts for metrics.
    pub fn stats(&self) -> ShardStats {
        ShardStats {
            owned: u32::try_from(self.inner.terms.lock().len()).unwrap_or(u32::MAX),
            started: self.inner.started.load(Ordering::Relaxed),
            handed_off: self.inner.handed_off.load(Ordering::Relaxed),
            lost: self.inner.lost.load(Ordering::Relaxed),
        }
    }

    /// Runs the replica until `stop` is cancelled: holds its membership, lists the members,
    /// and acquires, renews, hands over and releases shard Leases every retry period.
    ///
    /// On stop, it ends every term, releases its membership, keeps renewing each shard's Lease
    /// until the consumer has dropped that shard's term, releases it, and returns once no
    /// Lease is held (a Lease it cannot renew lapses at the renew deadline). Dropping the
    /// future ends every term without a release (a crash). A second concurrent `run` of the
    /// same replica returns at once.
    pub async fn run(&self, stop: CancellationToken) {
        if self.inner.running.swap(true, Ordering::AcqRel) {
            tracing::error!(
                identity = %self.inner.identity,
                "this replica's shard assignment is already running; the second run returns"
            );
            return;
        }
        let mut run = Run::new(self);
        loop {
            let pass_start = Instant::now();
            run.pass(&stop).await;
            if run.leaving && run.done_leaving() {
                return;
            }
            run.wait(pass_start + self.inner.config.timings.retry_period, &stop)
                .await;
        }
    }

    pub(super) fn publish(&self, members: Option<Vec<String>>, member: bool) {
        let owned: BTreeSet<u32> = self.inner.terms.lock().keys().copied().collect();
        let changed = self.inner.status.send_if_modified(|s| {
            let members = members.filter(|m| *m != s.members);
            let changed = s.owned != owned || s.member != member || members.is_some();
            s.owned = owned;
            s.member = member;
            if let Some(members) = members {
                s.members = members;
            }
            changed
        });
        if changed {
            let status = self.inner.status.borrow();
            tracing::info!(
                identity = %self.inner.identity,
                owned = status.owned.len(),
                shards = self.inner.config.shards,
                members = status.members.len(),
                "shard ownership changed"
            );
        }
    }

    pub(super) fn start_term(&self, shard: u32, number: u64) {
        let range = self.inner.ranges[shard as usize];
        let term = ShardTerm::new(
            shard,
            self.inner.config.shards,
            range,
            number,
            Arc::clone(&self.inner.acked),
        );
        self.inner.terms.lock().insert(shard, term);
        self.inner.started.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(identity = %self.inner.identity, shard, term = number, "started owning the shard");
    }

    /// Ends the current term on `shard`: cancelled, and the runner's clone dropped. Returns
    /// the flag set once every clone is gone.
    ///
    /// Counts a hand-over only once the Lease is released (by the caller).
    pub(super) fn end_term(&self, shard: u32) -> Option<Arc<AtomicBool>> {
        let term = self.inner.terms.lock().remove(&shard)?;
        term.end();
        tracing::debug!(identity = %self.inner.identity, shard, term = term.number(), "stopped owning the shard");
        let done = term.done_flag();
        drop(term);
        Some(done)
    }
}
