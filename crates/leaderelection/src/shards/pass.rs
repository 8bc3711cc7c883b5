//! A running replica's passes: the membership Lease and the listing of the members, then every
//! shard Lease, with each term cut at its renew deadline whatever the requests in flight.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::desired_owner;
use super::runner::ShardRunner;
use crate::attempt::{Attempt, Claim, Seen};
use crate::lock::{LeaseLock, LockError, Observed};

/// Where a replica stands with one Lease.
#[derive(Debug)]
enum Hold {
    /// Not held (as far as it knows).
    Free,
    /// Held, the term current; renewed at the start of the last successful write.
    Owned { renewed_at: Instant },
    /// Held, the term ended, waiting for the consumer to drop it before releasing.
    Ending {
        renewed_at: Instant,
        done: Arc<AtomicBool>,
    },
}

impl Hold {
    fn renewed_at(&self) -> Option<Instant> {
        match self {
            Hold::Free => None,
            Hold::Owned { renewed_at } | Hold::Ending { renewed_at, .. } => Some(*renewed_at),
        }
    }
}

/// One Lease's local state.
struct Slot {
    lock: Arc<dyn LeaseLock>,
    seen: Seen,
    hold: Hold,
    /// Terms started on it by this replica.
    terms: u64,
}

impl Slot {
    fn new(lock: Arc<dyn LeaseLock>) -> Self {
        Self {
            lock,
            seen: Seen::default(),
            hold: Hold::Free,
            terms: 0,
        }
    }
}

/// What to do with a shard's Lease in a pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Nothing,
    /// Acquire (when free) or renew (when held): one attempt.
    Attempt,
    /// End the term, then renew or, once the consumer acknowledged, release.
    HandOver,
    Release,
}

/// The policy: the step for a shard held as `hold`, of which this replica is the desired owner
/// or not, whose Lease (as last seen) names this replica or not.
fn step(hold: &Hold, desired: bool, names_us: bool) -> Step {
    match hold {
        Hold::Owned { .. } if desired => Step::Attempt,
        Hold::Owned { .. } => Step::HandOver,
        Hold::Ending { done, .. } if done.load(Ordering::Acquire) => Step::Release,
        Hold::Ending { .. } => Step::Attempt,
        Hold::Free if desired => Step::Attempt,
        // Taken back after a cut, or a renewal that answered after its term was cut.
        Hold::Free if names_us => Step::Release,
        Hold::Free => Step::Nothing,
    }
}

/// Which Lease a request is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    Member,
    Shard(u32),
}

/// A request's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Acquire,
    Renew,
    Release,
}

/// A request on a Lease and how it went.
struct Answer {
    target: Target,
    kind: Kind,
    start: Instant,
    seen: Seen,
    result: Result<Attempt, LockError>,
}

/// What a request of a pass gave.
enum Outcome {
    Lease(Answer),
    Listed(Result<Vec<(String, Observed)>, LockError>),
}

/// The state of a running replica. Dropped (a stop or a crash), it ends every term.
pub(super) struct Run<'a> {
    runner: &'a ShardRunner,
    member: Slot,
    /// Other replicas' membership Leases, by name.
    members: BTreeMap<String, Seen>,
    shards: Vec<Slot>,
    pub(super) leaving: bool,
    member_released: bool,
    /// Whether the membership Lease was found held by another replica (warned once).
    member_taken: bool,
}

impl Drop for Run<'_> {
    fn drop(&mut self) {
        for shard in 0..self.runner.inner.config.shards {
            self.runner.end_term(shard);
        }
        self.runner.publish(Some(Vec::new()), false);
        self.runner.inner.running.store(false, Ordering::Release);
    }
}

impl<'a> Run<'a> {
    pub(super) fn new(runner: &'a ShardRunner) -> Self {
        let (store, config) = (&runner.inner.store, &runner.inner.config);
        Self {
            runner,
            member: Slot::new(store.lock(&config.member_lease())),
            members: BTreeMap::new(),
            shards: (0..config.shards)
                .map(|shard| Slot::new(store.lock(&config.shard_lease(shard))))
                .collect(),
            leaving: false,
            member_released: false,
            member_taken: false,
        }
    }

    /// One pass: the membership Lease and the listing of the Leases, then every shard's
    /// Lease.
    pub(super) async fn pass(&mut self, stop: &CancellationToken) {
        let mut set = JoinSet::new();
        if !self.leaving {
            self.spawn(&mut set, Target::Member, Kind::Renew);
            let prefix = self.runner.inner.config.lease_prefix();
            let (runner, bound) = (
                self.runner.clone(),
                self.runner.inner.config.timings.renew_deadline,
            );
            set.spawn(async move {
                let listed = tokio::time::timeout(bound, runner.inner.store.list(&prefix)).await;
                Outcome::Listed(listed.unwrap_or_else(|_| {
                    Err(LockError::Storage(
                        "no answer within the renew deadline".into(),
                    ))
                }))
            });
        } else if !self.member_released {
            self.member_released = true;
            self.spawn(&mut set, Target::Member, Kind::Release);
        }
        self.drive(&mut set, stop).await;

        let members = self.live_members();
        let me = &*self.runner.inner.identity;
        for shard in 0..self.runner.inner.config.shards {
            let desired = !self.leaving
                && desired_owner(members.iter().map(String::as_str), shard) == Some(me);
            self.plan(&mut set, shard, desired);
        }
        self.runner.publish(Some(members), self.is_member());
        self.drive(&mut set, stop).await;
    }

    /// Whether a leaving replica has let go of everything.
    pub(super) fn done_leaving(&self) -> bool {
        self.member_released && self.shards.iter().all(|s| matches!(s.hold, Hold::Free))
    }

    /// Waits until `until`, cutting terms at their deadlines, releasing the Leases of
    /// acknowledged terms at once, and starting to leave on `stop`.
    pub(super) async fn wait(&mut self, until: Instant, stop: &CancellationToken) {
        let acked = Arc::clone(&self.runner.inner.acked);
        loop {
            let deadline = self.next_deadline();
            tokio::select! {
                () = tokio::time::sleep_until(until) => return,
                () = sleep_until(deadline) => self.expire(),
                () = acked.notified() => {
                    let mut set = JoinSet::new();
                    for shard in 0..self.runner.inner.config.shards {
                        let slot = &self.shards[shard as usize];
                        if let Hold::Ending { done, .. } = &slot.hold && done.load(Ordering::Acquire) {
                            self.spawn(&mut set, Target::Shard(shard), Kind::Release);
                        }
                    }
                    self.drive(&mut set, stop).await;
                }
                () = stop.cancelled(), if !self.leaving => {
                    self.leave();
                    return;
                }
            }
        }
    }

    /// Runs the requests in `set` to their end, applying each answer as it comes, cutting
    /// terms at their deadlines meanwhile.
    async fn drive(&mut self, set: &mut JoinSet<Outcome>, stop: &CancellationToken) {
        loop {
            let deadline = self.next_deadline();
            tokio::select! {
                done = set.join_next() => match done {
                    None => return,
                    Some(Ok(outcome)) => self.apply(outcome),
                    Some(Err(e)) => tracing::debug!("a Lease request did not complete: {e}"),
                },
                () = sleep_until(deadline) => self.expire(),
                () = stop.cancelled(), if !self.leaving => self.leave(),
            }
        }
    }

    /// Plans `shard`'s step in this pass, ending its term now for a hand-over.
    fn plan(&mut self, set: &mut JoinSet<Outcome>, shard: u32, desired: bool) {
        let runner = self.runner;
        let slot = &mut self.shards[shard as usize];
        let names_us = slot.seen.holder() == Some(&*runner.inner.identity);
        let mut next = step(&slot.hold, desired, names_us);
        if next == Step::HandOver {
            let done = runner
                .end_term(shard)
                .unwrap_or_else(|| Arc::new(AtomicBool::new(true)));
            let renewed_at = slot.hold.renewed_at().unwrap_or_else(Instant::now);
            slot.hold = Hold::Ending { renewed_at, done };
            next = step(&slot.hold, false, names_us);
        }
        let kind = match (next, &slot.hold) {
            (Step::Attempt, Hold::Free) => Kind::Acquire,
            (Step::Attempt, _) => Kind::Renew,
            (Step::Release, _) => Kind::Release,
            (Step::Nothing | Step::HandOver, _) => return,
        };
        self.spawn(set, Target::Shard(shard), kind);
    }

    /// Sends one request on the Lease `target`, bounded by the renew deadline.
    fn spawn(&mut self, set: &mut JoinSet<Outcome>, target: Target, kind: Kind) {
        let slot = match target {
            Target::Member => &mut self.member,
            Target::Shard(shard) => &mut self.shards[shard as usize],
        };
        let seen = std::mem::take(&mut slot.seen);
        let lock = Arc::clone(&slot.lock);
        let inner = &self.runner.inner;
        let identity = Arc::clone(&inner.identity);
        let (lease, bound) = (inner.record_lease, inner.config.timings.renew_deadline);
        set.spawn(async move {
            let start = Instant::now();
            let request = request(lock.as_ref(), &identity, lease, kind, seen);
            let (seen, result) = match tokio::time::timeout(bound, request).await {
                Ok(done) => done,
                Err(_) => (
                    Seen::default(),
                    Err(LockError::Storage(
                        "no answer within the renew deadline".into(),
                    )),
                ),
            };
            Outcome::Lease(Answer {
                target,
                kind,
                start,
                seen,
                result,
            })
        });
    }

    fn apply(&mut self, outcome: Outcome) {
        match outcome {
            Outcome::Listed(Ok(listed)) => self.note_listed(listed),
            Outcome::Listed(Err(e)) => {
                tracing::debug!(store = %self.runner.inner.store.describe(), "listing the Leases: {e}");
            }
            Outcome::Lease(answer) => {
                if let Err(e) = &answer.result {
                    let (target, kind) = (answer.target, answer.kind);
                    tracing::debug!(identity = %self.runner.inner.identity, ?target, ?kind, "a Lease request failed: {e}");
                }
                match answer.target {
                    Target::Member => self.apply_member(answer),
                    Target::Shard(shard) => self.apply_shard(shard, answer),
                }
            }
        }
        self.runner.publish(None, self.is_member());
    }

    fn apply_member(&mut self, answer: Answer) {
        let (start, holder) = (answer.start, answer.seen.holder().map(str::to_owned));
        self.member.seen = answer.seen;
        match (answer.kind, answer.result) {
            (Kind::Release, Ok(_)) => self.member.hold = Hold::Free,
            (_, Ok(Attempt::Held)) => {
                let renewed_at = self
                    .member
                    .hold
                    .renewed_at()
                    .map_or(start, |r| r.max(start));
                self.member.hold = Hold::Owned { renewed_at };
                self.member_taken = false;
            }
            (_, Ok(_)) if !self.member_taken => {
                self.member_taken = true;
                tracing::warn!(
                    lease = %self.runner.inner.config.member_lease(),
                    holder = holder.as_deref().unwrap_or_default(),
                    identity = %self.runner.inner.identity,
                    "this replica's membership Lease is held by another replica: identities must be unique"
                );
            }
            _ => {}
        }
    }

    fn apply_shard(&mut self, shard: u32, answer: Answer) {
        let runner = self.runner;
        let (start, deadline) = (answer.start, runner.inner.config.timings.renew_deadline);
        let slot = &mut self.shards[shard as usize];
        slot.seen = answer.seen;
        match (answer.kind, answer.result, &mut slot.hold) {
            (_, Err(_), _) => {}
            // An acquisition answered too late for a term is left to the next pass.
            (Kind::Acquire, Ok(Attempt::Held), Hold::Free)
                if !self.leaving && Instant::now() < start + deadline =>
            {
                slot.terms += 1;
                runner.start_term(shard, slot.terms);
                slot.hold = Hold::Owned { renewed_at: start };
            }
            (
                Kind::Renew,
                Ok(Attempt::Held),
                Hold::Owned { renewed_at } | Hold::Ending { renewed_at, .. },
            ) => {
                *renewed_at = (*renewed_at).max(start);
            }
            (Kind::Release, Ok(_), Hold::Ending { .. }) => {
                slot.hold = Hold::Free;
                runner.inner.handed_off.fetch_add(1, Ordering::Relaxed);
            }
            (Kind::Renew, Ok(Attempt::Taken), Hold::Owned { .. } | Hold::Ending { .. }) => {
                // Another replica holds it: whatever the clocks say, this term is over.
                runner.end_term(shard);
                slot.hold = Hold::Free;
                runner.inner.lost.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    identity = %runner.inner.identity,
                    shard,
                    holder = slot.seen.holder().unwrap_or_default(),
                    "found the shard's Lease held by another replica; stopped owning the shard"
                );
            }
            _ => {}
        }
    }

    /// Notes the Leases listed: the other replicas' membership Leases, and every shard's
    /// Lease, so that a shard whose owner stopped renewing is seen expired a lease duration
    /// after its last write, not after this replica first looked at it.
    fn note_listed(&mut self, listed: Vec<(String, Observed)>) {
        let config = &self.runner.inner.config;
        let (prefix, own) = (config.member_prefix(), config.member_lease());
        let shard_prefix = config.shard_lease_prefix();
        let mut members = BTreeMap::new();
        for (name, observed) in listed {
            if let Some(suffix) = name.strip_prefix(&prefix) {
                if name != own
                    && suffix.len() == 16
                    && suffix.bytes().all(|b| b.is_ascii_hexdigit())
                {
                    let mut seen = self.members.remove(&name).unwrap_or_default();
                    seen.note(observed);
                    members.insert(name, seen);
                }
            } else if let Some(shard) = name
                .strip_prefix(&shard_prefix)
                .and_then(|index| index.parse::<u32>().ok())
                .filter(|shard| config.shard_lease(*shard) == name)
                && let Some(slot) = self.shards.get_mut(shard as usize)
            {
                slot.seen.note(observed);
            }
        }
        self.members = members;
    }

    /// The live members: those whose membership Lease names a holder and changed within its
    /// lease duration (by this replica's clock, from when it saw the change), and this replica
    /// while it holds its own.
    fn live_members(&self) -> Vec<String> {
        let now = Instant::now();
        let me = &*self.runner.inner.identity;
        let mut live: Vec<String> = self
            .members
            .values()
            .filter(|seen| seen.expiry().is_some_and(|expiry| now < expiry))
            .filter_map(|seen| seen.holder())
            .filter(|holder| *holder != me)
            .map(str::to_owned)
            .collect();
        if self.is_member() {
            live.push(me.to_owned());
        }
        live.sort();
        live.dedup();
        live
    }

    fn is_member(&self) -> bool {
        !self.leaving && matches!(self.member.hold, Hold::Owned { .. })
    }

    /// Starts leaving: every term ends now (each Lease is released once its term is
    /// acknowledged), and the membership is released at the next pass.
    fn leave(&mut self) {
        self.leaving = true;
        for shard in 0..self.runner.inner.config.shards {
            let slot = &mut self.shards[shard as usize];
            if let Hold::Owned { renewed_at } = slot.hold {
                let done = self
                    .runner
                    .end_term(shard)
                    .unwrap_or_else(|| Arc::new(AtomicBool::new(true)));
                slot.hold = Hold::Ending { renewed_at, done };
            }
        }
        self.runner.publish(None, false);
    }

    /// The earliest renew deadline of the Leases held.
    fn next_deadline(&self) -> Option<Instant> {
        let deadline = self.runner.inner.config.timings.renew_deadline;
        std::iter::once(&self.member)
            .chain(&self.shards)
            .filter_map(|slot| slot.hold.renewed_at())
            .min()
            .map(|renewed_at| renewed_at + deadline)
    }

    /// Cuts the terms (and the membership) whose renew deadline has passed.
    fn expire(&mut self) {
        let now = Instant::now();
        let deadline = self.runner.inner.config.timings.renew_deadline;
        let past = |hold: &Hold| hold.renewed_at().is_some_and(|r| now >= r + deadline);
        if past(&self.member.hold) {
            self.member.hold = Hold::Free;
            tracing::warn!(
                identity = %self.runner.inner.identity,
                "could not renew the membership Lease within the renew deadline; no longer a member"
            );
        }
        let mut cut = Vec::new();
        for (shard, slot) in (0..).zip(self.shards.iter_mut()) {
            if past(&slot.hold) {
                self.runner.end_term(shard);
                slot.hold = Hold::Free;
                self.runner.inner.lost.fetch_add(1, Ordering::Relaxed);
                cut.push(shard);
            }
        }
        if !cut.is_empty() {
            tracing::warn!(
                identity = %self.runner.inner.identity,
                shards = ?cut,
                "could not renew the shards' Leases within the renew deadline; stopped owning them"
            );
        }
        self.runner.publish(None, self.is_member());
    }
}

/// Sleeps until `deadline`, or forever without one.
async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// One request on a Lease, giving back what was seen.
async fn request(
    lock: &dyn LeaseLock,
    identity: &str,
    lease: std::time::Duration,
    kind: Kind,
    mut seen: Seen,
) -> (Seen, Result<Attempt, LockError>) {
    let report = |_: Option<&str>| {};
    let claim = Claim {
        lock,
        identity,
        lease,
        report: &report,
    };
    let result = match kind {
        Kind::Release => claim.release(&mut seen).await.map(|()| Attempt::Taken),
        Kind::Acquire | Kind::Renew => claim.attempt(&mut seen).await,
    };
    (seen, result)
}

#[cfg(test)]
mod tests {
    use super::{Hold, Step, step};
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;
    use tokio::time::Instant;

    #[test]
    fn the_step_for_each_hold() {
        let now = Instant::now();
        let owned = Hold::Owned { renewed_at: now };
        let ending = |acked: bool| Hold::Ending {
            renewed_at: now,
            done: Arc::new(AtomicBool::new(acked)),
        };
        let table = [
            (&owned, true, true, Step::Attempt),
            (&owned, false, true, Step::HandOver),
            (&ending(false), false, true, Step::Attempt),
            (&ending(false), true, true, Step::Attempt),
            (&ending(true), false, true, Step::Release),
            (&ending(true), true, true, Step::Release),
            (&Hold::Free, true, false, Step::Attempt),
            (&Hold::Free, true, true, Step::Attempt),
            (&Hold::Free, false, true, Step::Release),
            (&Hold::Free, false, false, Step::Nothing),
        ];
        for (hold, desired, names_us, expected) in table {
            assert_eq!(
                step(hold, desired, names_us),
                expected,
                "{hold:?} {desired} {names_us}"
            );
        }
    }
}
