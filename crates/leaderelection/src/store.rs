//! Many leases by name: [`LeaseStore`] gives the lock of a named lease and lists the leases
//! whose names share a prefix, which is what a shard assignment needs (a lease per replica and
//! one per shard). [`KubeLeases`](crate::KubeLeases) keeps them as the Leases of a namespace,
//! [`MemoryLeases`] in memory.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use parking_lot::Mutex;

use crate::lock::{LeaseLock, LockError, MemoryLease, Observed};

/// Named leases: the lock of each, and a listing by name prefix.
#[async_trait::async_trait]
pub trait LeaseStore: Send + Sync + 'static {
    /// The lock on the lease `name` (which need not exist yet: the lock creates it).
    fn lock(&self, name: &str) -> Arc<dyn LeaseLock>;

    /// Every existing lease whose name starts with `prefix`, with its record and version, in
    /// no particular order.
    async fn list(&self, prefix: &str) -> Result<Vec<(String, Observed)>, LockError>;

    /// What the store is, for logs (`leases/default`).
    fn describe(&self) -> String;
}

/// Leases in memory, by name: clones (and [`handle`](Self::handle)s) share them. For tests on
/// tokio's paused clock and for replicas of one process.
///
/// Each handle has a reachability switch of its own, which covers every lock it gives out:
/// [`set_reachable(false)`](Self::set_reachable) cuts a replica off from all its leases, as a
/// partition would.
#[derive(Debug, Clone, Default)]
pub struct MemoryLeases {
    leases: Arc<Mutex<BTreeMap<String, MemoryLease>>>,
    unreachable: Arc<AtomicBool>,
}

impl MemoryLeases {
    /// No leases yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Another way to the same leases, reachable, with a switch of its own.
    pub fn handle(&self) -> Self {
        Self {
            leases: Arc::clone(&self.leases),
            unreachable: Arc::default(),
        }
    }

    /// Cuts this handle and every lock it gave off (`false`: their requests fail with
    /// [`LockError::Storage`]) or restores them.
    pub fn set_reachable(&self, reachable: bool) {
        self.unreachable
            .store(!reachable, std::sync::atomic::Ordering::Relaxed);
    }

    /// The lease `name` itself (reachable whatever the switches), to inspect or to write as a
    /// test would.
    pub fn lease(&self, name: &str) -> MemoryLease {
        self.leases
            .lock()
            .entry(name.to_owned())
            .or_default()
            .clone()
    }

    /// How many writes all the leases have taken.
    pub fn writes(&self) -> u64 {
        self.leases.lock().values().map(MemoryLease::writes).sum()
    }
}

#[async_trait::async_trait]
impl LeaseStore for MemoryLeases {
    fn lock(&self, name: &str) -> Arc<dyn LeaseLock> {
        Arc::new(self.lease(name).with_switch(Arc::clone(&self.unreachable)))
    }

    async fn list(&self, prefix: &str) -> Result<Vec<(String, Observed)>, LockError> {
        let mut listed = Vec::new();
        let locks: Vec<(String, MemoryLease)> = self
            .leases
            .lock()
            .iter()
            .filter(|(name, _)| name.starts_with(prefix))
            .map(|(name, lease)| {
                (
                    name.clone(),
                    lease.with_switch(Arc::clone(&self.unreachable)),
                )
            })
            .collect();
        for (name, lock) in locks {
            if let Some(observed) = lock.get().await? {
                listed.push((name, observed));
            }
        }
        Ok(listed)
    }

    fn describe(&self) -> String {
        "memory".into()
    }
}
