//! One attempt on one lease, shared by the election and the shard assignment: what a replica
//! has seen of the lease (and since when, by its own clock), the acquire-or-renew step, and the
//! release.

use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use crate::lock::{LeaderRecord, LeaseLock, LockError, Observed};

/// What a replica has seen of one lease.
#[derive(Debug)]
pub(crate) struct Seen {
    /// The record last read or written, with its version.
    pub(crate) observed: Option<Observed>,
    /// When this replica first saw `observed`'s version, by its own clock.
    pub(crate) at: Instant,
    /// The holder last reported (to the `report` function of [`Claim`]).
    reported: Option<Option<String>>,
}

impl Default for Seen {
    fn default() -> Self {
        Self {
            observed: None,
            at: Instant::now(),
            reported: None,
        }
    }
}

impl Seen {
    /// The holder last seen, if any.
    pub(crate) fn holder(&self) -> Option<&str> {
        self.observed.as_ref()?.record.holder.as_deref()
    }

    /// When the lease seen expires for this replica: the instant it first saw the version
    /// plus the lease duration the record states; `None` when free or not seen.
    pub(crate) fn expiry(&self) -> Option<Instant> {
        let observed = self.observed.as_ref()?;
        observed.record.holder.as_ref()?;
        Some(self.expiry_of(&observed.record))
    }

    /// When `record`, first seen at `self.at`, expires (a duration past what a clock can
    /// count, as only a broken record states, is taken as about 68 years).
    fn expiry_of(&self, record: &LeaderRecord) -> Instant {
        const LONGEST: Duration = Duration::from_secs(i32::MAX as u64);
        self.at
            .checked_add(record.lease_duration)
            .unwrap_or(self.at + LONGEST)
    }

    /// Notes a record seen: the instant is reset only for a version not seen before.
    pub(crate) fn note(&mut self, observed: Observed) {
        if self.observed.as_ref().map(|o| &o.version) != Some(&observed.version) {
            self.at = Instant::now();
        }
        self.observed = Some(observed);
    }
}

/// How an attempt to acquire or renew went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Attempt {
    /// The lease is ours (acquired or renewed).
    Held,
    /// Another replica holds an unexpired lease.
    Taken,
    /// The write lost a race, or the storage failed.
    Failed,
}

/// A replica's claim on one lease: its lock, its identity, the lease duration it writes, and
/// whom to tell of a new holder.
pub(crate) struct Claim<'a> {
    pub(crate) lock: &'a dyn LeaseLock,
    pub(crate) identity: &'a str,
    /// The lease duration as written: whole seconds.
    pub(crate) lease: Duration,
    /// Told of each holder seen that differs from the one told before.
    pub(crate) report: &'a (dyn Fn(Option<&str>) + Send + Sync),
}

impl Claim<'_> {
    /// One attempt: renew our lease, or acquire a free, released or expired one (client-go's
    /// `tryAcquireOrRenew`). A lost race or a failure is an error.
    pub(crate) async fn attempt(&self, seen: &mut Seen) -> Result<Attempt, LockError> {
        let me = self.identity;
        let wall = SystemTime::now();
        let ours = |acquire_time: Option<SystemTime>, transitions: u32| LeaderRecord {
            holder: Some(me.to_owned()),
            lease_duration: self.lease,
            acquire_time,
            renew_time: Some(wall),
            transitions,
        };
        // The fast path: our record unchanged since we wrote it; replace it directly.
        if let Some(o) = seen
            .observed
            .as_ref()
            .filter(|o| o.record.holder.as_deref() == Some(me))
        {
            let record = ours(o.record.acquire_time, o.record.transitions);
            if let Ok(written) = self.lock.update(&o.version, &record).await {
                self.observe(seen, written);
                return Ok(Attempt::Held);
            }
        }
        let Some(current) = self.lock.get().await? else {
            let written = self.lock.create(&ours(Some(wall), 0)).await?;
            self.observe(seen, written);
            return Ok(Attempt::Held);
        };
        self.observe(seen, current.clone());
        let holder = current.record.holder.as_deref();
        let expired = Instant::now() >= seen.expiry_of(&current.record);
        if holder.is_some_and(|h| h != me) && !expired {
            return Ok(Attempt::Taken);
        }
        let record = if holder == Some(me) {
            ours(current.record.acquire_time, current.record.transitions)
        } else {
            ours(Some(wall), current.record.transitions.saturating_add(1))
        };
        let written = self.lock.update(&current.version, &record).await?;
        self.observe(seen, written);
        Ok(Attempt::Held)
    }

    /// Frees the lease if it still names us: no holder and a 1 s lease, so that a successor
    /// takes it at its next attempt (client-go's `release`). A conflict reads it again; a
    /// lease gone or held by another is left as it is.
    pub(crate) async fn release(&self, seen: &mut Seen) -> Result<(), LockError> {
        loop {
            let Some(current) = self.lock.get().await? else {
                return Ok(());
            };
            self.observe(seen, current.clone());
            if current.record.holder.as_deref() != Some(self.identity) {
                return Ok(());
            }
            let now = SystemTime::now();
            let record = LeaderRecord {
                holder: None,
                lease_duration: Duration::from_secs(1),
                acquire_time: Some(now),
                renew_time: Some(now),
                transitions: current.record.transitions,
            };
            match self.lock.update(&current.version, &record).await {
                Ok(written) => {
                    self.observe(seen, written);
                    return Ok(());
                }
                Err(LockError::Conflict) => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Notes a record seen, and reports its holder if it is not the one reported before.
    fn observe(&self, seen: &mut Seen, observed: Observed) {
        let holder = observed.record.holder.clone();
        seen.note(observed);
        if seen.reported.as_ref() != Some(&holder) {
            (self.report)(holder.as_deref());
            seen.reported = Some(holder);
        }
    }
}

/// The lease duration a record states: whole seconds, rounded up (a Lease's
/// `leaseDurationSeconds`).
pub(crate) fn record_lease(lease_duration: Duration) -> Duration {
    Duration::from_secs(lease_duration.as_secs_f64().ceil() as u64)
}
