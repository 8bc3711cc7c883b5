//! The lock an election is held on: a leader record stored with optimistic concurrency.
//!
//! [`LeaseLock`] is all the elector needs from its storage: read the record with its version,
//! create it, and replace it *only if* it still has the version read (a compare-and-swap). On
//! Kubernetes that is a `coordination.k8s.io/v1` Lease and its `resourceVersion`
//! ([`KubeLease`](crate::KubeLease)); [`MemoryLease`] keeps it in memory, for tests and for
//! replicas of one process.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;

/// What a lease says: who holds it, for how long, since when. The wall-clock times are for
/// people (`kubectl get lease`); the elector never compares them with its own clock.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LeaderRecord {
    /// The holder's identity; `None` when the lease is free (released).
    pub holder: Option<String>,
    /// How long the holder may go without renewing before others may take the lease.
    pub lease_duration: Duration,
    /// When the current holder acquired it.
    pub acquire_time: Option<SystemTime>,
    /// When the current holder last renewed it.
    pub renew_time: Option<SystemTime>,
    /// How many times the lease changed hands.
    pub transitions: u32,
}

/// A record as read from the lock, with the version a replacement must name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    /// The record.
    pub record: LeaderRecord,
    /// Its version (a Lease's `resourceVersion`); every write changes it.
    pub version: String,
}

/// Why a lock operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// The record changed since it was read (409 Conflict): another replica wrote first. A lost
    /// race, not a failure.
    #[error("the lease was changed by another replica since it was read")]
    Conflict,
    /// A create found the record already there (409 AlreadyExists): also a lost race.
    #[error("the lease already exists")]
    AlreadyExists,
    /// A replacement found no record (it was deleted).
    #[error("the lease does not exist")]
    NotFound,
    /// Anything else: the storage is unreachable, refused the request, or answered garbage.
    #[error("lease storage: {0}")]
    Storage(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl LockError {
    /// Whether this is a lost race (another replica wrote first), not a failure.
    pub fn is_lost_race(&self) -> bool {
        matches!(self, Self::Conflict | Self::AlreadyExists)
    }
}

/// Storage for a leader record with compare-and-swap writes.
#[async_trait::async_trait]
pub trait LeaseLock: Send + Sync + 'static {
    /// The record and its version; `None` if there is none yet.
    async fn get(&self) -> Result<Option<Observed>, LockError>;

    /// Creates the record; [`LockError::AlreadyExists`] if there is one.
    async fn create(&self, record: &LeaderRecord) -> Result<Observed, LockError>;

    /// Replaces the record if its version is still `version`; [`LockError::Conflict`] if it
    /// changed, [`LockError::NotFound`] if it is gone.
    async fn update(&self, version: &str, record: &LeaderRecord) -> Result<Observed, LockError>;

    /// What the lock is, for logs (`leases/default/my-controller`).
    fn describe(&self) -> String;
}

#[async_trait::async_trait]
impl<L: LeaseLock + ?Sized> LeaseLock for Arc<L> {
    async fn get(&self) -> Result<Option<Observed>, LockError> {
        (**self).get().await
    }
    async fn create(&self, record: &LeaderRecord) -> Result<Observed, LockError> {
        (**self).create(record).await
    }
    async fn update(&self, version: &str, record: &LeaderRecord) -> Result<Observed, LockError> {
        (**self).update(version, record).await
    }
    fn describe(&self) -> String {
        (**self).describe()
    }
}

/// A lock in memory: clones share one record. For tests (on tokio's paused clock, with no
/// network in the way) and for candidates within one process.
///
/// [`handle`](Self::handle) gives a candidate a way to the record of its own, which a test can
/// cut ([`set_reachable(false)`](Self::set_reachable): its requests fail) as a partition would.
#[derive(Debug, Clone, Default)]
pub struct MemoryLease {
    state: Arc<Mutex<Option<(LeaderRecord, u64)>>>,
    unreachable: Arc<std::sync::atomic::AtomicBool>,
}

impl MemoryLease {
    /// An empty lock (no record yet).
    pub fn new() -> Self {
        Self::default()
    }

    /// Another way to the same record, reachable, with a switch of its own.
    pub fn handle(&self) -> Self {
        self.with_switch(Arc::default())
    }

    /// Another way to the same record, through the reachability switch `unreachable`.
    pub(crate) fn with_switch(&self, unreachable: Arc<std::sync::atomic::AtomicBool>) -> Self {
        Self {
            state: Arc::clone(&self.state),
            unreachable,
        }
    }

    /// Cuts this handle off (`false`: every request through it fails with
    /// [`LockError::Storage`]) or restores it.
    pub fn set_reachable(&self, reachable: bool) {
        self.unreachable
            .store(!reachable, std::sync::atomic::Ordering::Relaxed);
    }

    fn reach(&self) -> Result<(), LockError> {
        if self.unreachable.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(LockError::Storage(
                "the lease is unreachable from here".into(),
            ));
        }
        Ok(())
    }

    /// The record as stored now, if any.
    pub fn record(&self) -> Option<LeaderRecord> {
        self.state.lock().as_ref().map(|(r, _)| r.clone())
    }

    /// How many writes the lock has taken (creates and updates).
    pub fn writes(&self) -> u64 {
        self.state.lock().as_ref().map_or(0, |(_, v)| *v)
    }
}

#[async_trait::async_trait]
impl LeaseLock for MemoryLease {
    async fn get(&self) -> Result<Option<Observed>, LockError> {
        self.reach()?;
        Ok(self
            .state
            .lock()
            .as_ref()
            .map(|(record, version)| Observed {
                record: record.clone(),
                version: version.to_string(),
            }))
    }

    async fn create(&self, record: &LeaderRecord) -> Result<Observed, LockError> {
        self.reach()?;
        let mut state = self.state.lock();
        if state.is_some() {
            return Err(LockError::AlreadyExists);
        }
        *state = Some((record.clone(), 1));
        Ok(Observed {
            record: record.clone(),
            version: "1".into(),
        })
    }

    async fn update(&self, version: &str, record: &LeaderRecord) -> Result<Observed, LockError> {
        self.reach()?;
        let mut state = self.state.lock();
        let Some((stored, current)) = state.as_mut() else {
            return Err(LockError::NotFound);
        };
        if current.to_string() != version {
            return Err(LockError::Conflict);
        }
        *current += 1;
        *stored = record.clone();
        Ok(Observed {
            record: record.clone(),
            version: current.to_string(),
        })
    }

    fn describe(&self) -> String {
        "memory".into()
    }
}
