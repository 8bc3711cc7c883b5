//! What a reconcile is waiting to see in the cache: the creations and deletions it asked for,
//! not yet observed by the informers (client-go's `ControllerExpectations` and
//! `UIDTrackingControllerExpectations`, from `pkg/controller/controller_utils.go`).
//!
//! A reconcile that creates children reads them back from a cache that lags its own writes. Run
//! again before the cache has caught up (another change of the parent, a requeue), it would
//! count too few children and create more. With [`Expectations`], the reconcile records what it
//! asked for, the child informer's handler lowers the count as each one arrives, and the
//! reconcile acts only once the count is down to zero:
//!
//! ```
//! use informer_runtime::Expectations;
//!
//! let expectations = Expectations::new();
//! // No record: nothing awaited, act.
//! assert!(expectations.satisfied("demo/web"));
//!
//! // The reconcile of demo/web creates three pods.
//! expectations.expect_creations("demo/web", 3);
//! assert!(!expectations.satisfied("demo/web"));
//!
//! // The pod informer's on_add, for each pod owned by demo/web:
//! for _ in 0..3 {
//!     expectations.creation_observed("demo/web");
//! }
//! assert!(expectations.satisfied("demo/web"));
//! ```
//!
//! A record older than its [timeout](Expectations::with_timeout) (five minutes, as in
//! client-go) counts as satisfied: a creation that failed without being lowered, or an event
//! the watch lost, must not block the parent forever. Those are counted
//! ([`expired`](Expectations::expired)) and logged at debug level.
//!
//! [`Controller::owns_expecting`](crate::Controller::owns_expecting) wires the child informer
//! to them: each child added lowers its owners' creations, each child deleted their deletions
//! (by the child's key), in the same handler that then wakes the owners, so that an owner's
//! reconcile never runs on a change whose observation is not yet counted.
//!
//! Deletions can be tracked by the identity of what was deleted
//! ([`expect_deletions_of`](Expectations::expect_deletions_of) and
//! [`deletion_of_observed`](Expectations::deletion_of_observed)), so that one deletion seen
//! twice (marked for deletion, then gone) lowers the count once.
//!
//! # Expectations and read-your-own-writes
//!
//! The controller's read-your-own-writes gate
//! ([`Controller::read_your_writes`](crate::Controller::read_your_writes)) guards against the
//! same thing, a cache behind the reconcile's own writes, another way; the two are kept side
//! by side, not one folded into the other, since each covers what the other cannot:
//!
//! * the gate waits, before a reconcile starts, on resource versions: every write made through
//!   the `Client` (a feature of `kube`), of any type (creations, updates, status, deletions),
//!   with nothing to wire or check by hand; but only those writes, and only on a server whose
//!   versions are integers (Kubernetes 1.35 and later promise it);
//! * expectations count, inside the reconcile, the creations and deletions the child informer's
//!   handler observes: writes made by any path, on any server; but only creations and deletions
//!   of children the handler maps to their owner, set and checked by the reconcile.
//!
//! Used together they agree. A cache applies a change before it tells the handlers, so a
//! reconcile the gate lets through may find its expectations not yet met: it returns, and the
//! handler that meets them wakes it again; it never acts twice. A gate that timed out runs the
//! reconcile on a stale read, and unmet expectations still hold it back, for up to their own,
//! longer, timeout. When the owner is deleted both let go of it: the deletion's reconcile
//! replaces what the gate kept for the key, and the handler drops the expectations.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

/// How long a record is awaited before it counts as satisfied (client-go's
/// `ExpectationsTimeout`).
pub const EXPECTATIONS_TIMEOUT: Duration = Duration::from_secs(5 * 60);

/// What one key awaits.
#[derive(Debug)]
struct Record {
    /// Creations not yet observed (at or below zero: none).
    adds: i64,
    /// Deletions not yet observed.
    deletes: i64,
    /// When the record was set (raising or lowering it does not move this).
    set_at: Instant,
    /// The identities of the deletions awaited, when tracked by identity.
    deleting: HashSet<Arc<str>>,
    /// Whether deletions are tracked by identity (set by `expect_deletions_of`).
    by_identity: bool,
}

impl Record {
    fn new(adds: i64, deletes: i64) -> Self {
        Self {
            adds,
            deletes,
            set_at: Instant::now(),
            deleting: HashSet::new(),
            by_identity: false,
        }
    }

    fn fulfilled(&self) -> bool {
        self.adds <= 0 && self.deletes <= 0
    }
}

/// Creations and deletions awaited per key (see the [module docs](self)). Shared by cloning;
/// every method takes `&self`.
#[derive(Debug, Clone)]
pub struct Expectations {
    records: Arc<Mutex<HashMap<Arc<str>, Record>>>,
    timeout: Duration,
    expired: Arc<AtomicU64>,
}

impl Default for Expectations {
    fn default() -> Self {
        Self::new()
    }
}

impl Expectations {
    /// No record, and [`EXPECTATIONS_TIMEOUT`].
    pub fn new() -> Self {
        Self::with_timeout(EXPECTATIONS_TIMEOUT)
    }

    /// No record; a record older than `timeout` counts as satisfied.
    pub fn with_timeout(timeout: Duration) -> Self {
        Self {
            records: Arc::default(),
            timeout,
            expired: Arc::default(),
        }
    }

    /// Awaits `count` creations for `key`, replacing what it awaited before; the timeout runs
    /// from now.
    pub fn expect_creations(&self, key: &str, count: usize) {
        self.set(key, Record::new(to_i64(count), 0));
    }

    /// Awaits `count` deletions for `key`, replacing what it awaited before; the timeout runs
    /// from now.
    pub fn expect_deletions(&self, key: &str, count: usize) {
        self.set(key, Record::new(0, to_i64(count)));
    }

    /// Awaits the deletion of each of `identities` (uids, or keys) for `key`, replacing what it
    /// awaited before: only [`deletion_of_observed`](Self::deletion_of_observed) for one of
    /// them lowers the count, once each.
    pub fn expect_deletions_of<I, S>(&self, key: &str, identities: I)
    where
        I: IntoIterator<Item = S>,
        S: Into<Arc<str>>,
    {
        let deleting: HashSet<Arc<str>> = identities.into_iter().map(Into::into).collect();
        let mut record = Record::new(0, to_i64(deleting.len()));
        record.deleting = deleting;
        record.by_identity = true;
        self.set(key, record);
    }

    /// Awaits `adds` more creations and `deletes` more deletions for `key`, if it has a record
    /// (its timeout is not restarted); nothing otherwise.
    pub fn raise(&self, key: &str, adds: usize, deletes: usize) {
        self.adjust(key, to_i64(adds), to_i64(deletes));
    }

    /// Awaits `adds` fewer creations and `deletes` fewer deletions for `key`, if it has a
    /// record: for a creation or deletion that failed, and so will never be observed.
    pub fn lower(&self, key: &str, adds: usize, deletes: usize) {
        self.adjust(key, -to_i64(adds), -to_i64(deletes));
    }

    /// One awaited creation for `key` was observed (call it from the child informer's
    /// `on_add`).
    pub fn creation_observed(&self, key: &str) {
        self.lower(key, 1, 0);
    }

    /// One awaited deletion for `key` was observed (call it from the child informer's
    /// `on_delete`).
    pub fn deletion_observed(&self, key: &str) {
        self.lower(key, 0, 1);
    }

    /// The deletion of `identity` was observed. If `key` awaits deletions by identity, this
    /// lowers its count when that deletion was awaited and not yet observed, and does nothing
    /// otherwise (a deletion seen twice counts once); if it awaits a plain count, this lowers
    /// it, as [`deletion_observed`](Self::deletion_observed) does.
    pub fn deletion_of_observed(&self, key: &str, identity: &str) {
        let mut records = self.records.lock();
        if let Some(record) = records.get_mut(key)
            && (!record.by_identity || record.deleting.remove(identity))
        {
            record.deletes -= 1;
        }
    }

    /// Whether `key` may act: it awaits nothing (no record, or every creation and deletion
    /// observed), or its record has expired (counted, see [`expired`](Self::expired)).
    pub fn satisfied(&self, key: &str) -> bool {
        let records = self.records.lock();
        let Some(record) = records.get(key) else {
            return true;
        };
        if record.fulfilled() {
            return true;
        }
        let age = record.set_at.elapsed();
        if age > self.timeout {
            self.expired.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(
                key,
                adds = record.adds,
                deletes = record.deletes,
                ?age,
                "expectations expired: acting without having observed them"
            );
            return true;
        }
        false
    }

    /// What `key` still awaits, as (creations, deletions); `None` without a record. Counts can
    /// be negative (more observed than awaited).
    pub fn pending(&self, key: &str) -> Option<(i64, i64)> {
        self.records.lock().get(key).map(|r| (r.adds, r.deletes))
    }

    /// Drops `key`'s record (the parent itself was deleted).
    pub fn forget(&self, key: &str) {
        self.records.lock().remove(key);
    }

    /// How many times [`satisfied`](Self::satisfied) answered `true` only because a record had
    /// expired: each is a creation or deletion never observed (a failed write not lowered, or
    /// a lost event).
    pub fn expired(&self) -> u64 {
        self.expired.load(Ordering::Relaxed)
    }

    fn set(&self, key: &str, record: Record) {
        self.records.lock().insert(Arc::from(key), record);
    }

    fn adjust(&self, key: &str, adds: i64, deletes: i64) {
        if let Some(record) = self.records.lock().get_mut(key) {
            record.adds = record.adds.saturating_add(adds);
            record.deletes = record.deletes.saturating_add(deletes);
        }
    }
}

/// A count as the records keep it (no count of objects comes near `i64::MAX`).
fn to_i64(count: usize) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_record_is_awaited_until_observed_or_expired() {
        let e = Expectations::with_timeout(Duration::from_secs(60));
        e.expect_creations("a", 2);
        e.creation_observed("a");
        assert!(!e.satisfied("a"));
        assert_eq!(e.pending("a"), Some((1, 0)));
        // Raising does not restart the timeout.
        tokio::time::sleep(Duration::from_secs(40)).await;
        e.raise("a", 1, 0);
        tokio::time::sleep(Duration::from_secs(20)).await;
        assert!(!e.satisfied("a"), "exactly the timeout is not past it");
        assert_eq!(e.expired(), 0);
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert!(e.satisfied("a"), "expired");
        assert_eq!(e.expired(), 1);
        // Setting again restarts it.
        e.expect_deletions("a", 1);
        assert!(!e.satisfied("a"));
        assert_eq!(e.pending("a"), Some((0, 1)));
        e.deletion_observed("a");
        assert!(e.satisfied("a"));
        assert_eq!(e.expired(), 1, "fulfilled, not expired");
    }

    #[test]
    fn lowering_or_observing_without_a_record_changes_nothing() {
        let e = Expectations::new();
        e.creation_observed("a");
        e.deletion_observed("a");
        e.raise("a", 3, 3);
        e.deletion_of_observed("a", "uid-1");
        assert_eq!(e.pending("a"), None);
        assert!(e.satisfied("a"));
        // Observed beyond what was awaited: still satisfied, the count below zero.
        e.expect_creations("a", 1);
        e.creation_observed("a");
        e.creation_observed("a");
        assert_eq!(e.pending("a"), Some((-1, 0)));
        assert!(e.satisfied("a"));
        e.forget("a");
        assert_eq!(e.pending("a"), None);
    }

    #[test]
    fn deletions_tracked_by_identity_count_once_each() {
        let e = Expectations::new();
        e.expect_deletions_of("rs", ["uid-1", "uid-2"]);
        assert_eq!(e.pending("rs"), Some((0, 2)));
        e.deletion_of_observed("rs", "uid-1");
        // The same deletion again (marked, then gone), and one never awaited.
        e.deletion_of_observed("rs", "uid-1");
        e.deletion_of_observed("rs", "uid-9");
        assert_eq!(e.pending("rs"), Some((0, 1)));
        assert!(!e.satisfied("rs"));
        e.deletion_of_observed("rs", "uid-2");
        assert!(e.satisfied("rs"));
        // Setting anew drops the identities awaited before.
        e.expect_deletions_of("rs", ["uid-3"]);
        e.deletion_of_observed("rs", "uid-1");
        assert_eq!(e.pending("rs"), Some((0, 1)));
        // A plain count is lowered by any deletion.
        e.expect_deletions("rs", 2);
        e.deletion_of_observed("rs", "uid-1");
        e.deletion_of_observed("rs", "uid-1");
        assert_eq!(e.pending("rs"), Some((0, 0)));
    }
}
