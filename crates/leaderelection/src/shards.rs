//! Shard assignment on Leases: the replicas of a controller agree on which replica owns each
//! of N shards of the hash space, so that each caches and reconciles only its own.
//!
//! # Design
//!
//! Every replica runs a [`ShardRunner`] over a [`LeaseStore`](crate::LeaseStore) (on
//! Kubernetes the Leases of a namespace, [`KubeLeases`](crate::KubeLeases)), which holds two
//! kinds of Lease, named after the configured prefix:
//!
//! * **Membership**: one Lease per replica, `{prefix}-member-{hash of identity}`, held and
//!   renewed by that replica as a leader holds its lease. The *live members*, for a replica,
//!   are those whose membership Lease names a holder and changed within its lease duration, by
//!   this replica's own clock, from when it observed the change (it lists the Leases every
//!   retry period).
//! * **Fencing**: one Lease per shard, `{prefix}-shard-{index}`. A replica owns a shard only
//!   while it holds that Lease, acquired and renewed with the election's rules (LE-3, LE-4):
//!   acquired only when it is free, released, or observed unchanged for a whole lease
//!   duration; lost at the renew deadline, counted from the start of the last successful
//!   renewal. So the election's guarantee (LE-7) holds shard by shard: a shard never has two
//!   owners at once while the replicas' clocks run at rates within
//!   `(lease − deadline)/(lease + deadline)` of each other.
//!
//! The **desired owner** of each shard is chosen by rendezvous hashing
//! ([`desired_owner`]) over the identities of the live members. A replica acquires a shard's
//! Lease only when it is the desired owner; a holder that is no longer the desired owner ends
//! its term (its [`ShardTerm`] is ended and the runner waits until the consumer has dropped it),
//! keeps renewing the Lease meanwhile, then releases it, so that the new owner takes it at its
//! next attempt. A replica joining or leaving changes the desired owner only of the shards for
//! which it weighs the most: only those move. The desired owner is a hint — two replicas may
//! briefly disagree on the members — and ownership is decided by the shard Leases alone, so a
//! disagreement delays a move but never makes two owners.
//!
//! Each retry period a replica renews its membership, lists the Leases (membership and shards,
//! one request: so it sees every shard Lease change, and one whose owner stopped renewing
//! expires a lease duration after its last write, for every replica), then works
//! all its shard Leases in one pass (concurrent requests): renews those it holds, tries those
//! it is the desired owner of, releases those it has handed off. The write load is one write
//! per held Lease per retry period — `(replicas + shards) / retry_period` for the whole
//! controller (19 writes in 2 s for 3 replicas and 16 shards with the defaults) — plus one
//! list per replica. Fewer shards or a longer retry period (with a longer lease and deadline)
//! lower it.
//!
//! ## The alternatives, and why not
//!
//! * **A Lease per shard, no membership**: every replica would contend for every shard, and
//!   nothing would spread the shards (the fastest replica takes all) or move them back when a
//!   replica joins, short of each replica guessing how many to give up. Membership is what
//!   tells every replica who is there.
//! * **Membership only, each replica computing its shards from the members**: two replicas
//!   that see the members differently (a join seen by one before the other, a partition)
//!   would both claim a shard. Without a per-shard compare-and-swap record, nothing fences
//!   the hand-over, and a replica would have to wait a full lease duration after every
//!   membership change before taking a shard, even on a graceful move.
//! * **Liveness from membership alone, shard Leases written only on moves**: fewer writes
//!   (one per replica per retry period), but a shard's ownership would depend on two Leases,
//!   not one, and a shard Lease would look expired to anyone reading it as a Lease. Renewing
//!   the shard Leases keeps each one a plain leader Lease with the election's proof.
//!
//! ## What owning a shard does not do
//!
//! Like leading (LE-7), owning a shard is a lease, not a fence: a replica that stalls can still
//! have writes in flight after its term ended. A term cut by the renew deadline is not waited
//! for (the consumer is told, and the Lease lapses); only a graceful move waits for the
//! consumer. All replicas must use the same prefix, shard count and identities that stay
//! unique; changing the shard count takes a new prefix once every old replica has stopped.
//!
//! The [crate docs](crate#shards) have an example.

mod pass;
mod rendezvous;
mod runner;
mod term;

use std::collections::BTreeSet;

use crate::elector::{ConfigError, Timings};

pub use self::rendezvous::{desired_owner, shard_weight};
pub use self::runner::ShardRunner;
pub use self::term::ShardTerm;

/// The most shards a [`ShardConfig`] may have: each is a Lease renewed every retry period.
pub const MAX_SHARDS: u32 = 4096;

/// The Leases, identity, shard count and timings of one replica.
///
/// The timings' defaults and rules are the election's ([`ElectionConfig`](crate::ElectionConfig)):
/// a 15 s lease, a 10 s renew deadline, a 2 s retry period.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardConfig {
    /// The prefix of the Leases' names, the same for all replicas: `{name}-member-…` and
    /// `{name}-shard-{index}`.
    pub name: String,
    /// This replica's identity, unique among the replicas (a pod name).
    pub identity: String,
    /// How many shards the hash space is split into (`1..=MAX_SHARDS`), the same for all
    /// replicas: shard `i` is `ShardRange::shard(i, shards)`.
    pub shards: u32,
    /// The Leases' timings; the retry period is also how often the Leases are listed.
    pub timings: Timings,
}

impl ShardConfig {
    /// `shards` shards for the replica `identity` on the Leases prefixed `name`, with the
    /// election's default timings.
    pub fn new(name: impl Into<String>, identity: impl Into<String>, shards: u32) -> Self {
        Self {
            name: name.into(),
            identity: identity.into(),
            shards,
            timings: Timings::default(),
        }
    }

    /// Sets the timings.
    #[must_use]
    pub fn timings(mut self, timings: Timings) -> Self {
        self.timings = timings;
        self
    }

    /// Checks the election's timing rules, a non-empty identity, a shard count in
    /// `1..=MAX_SHARDS`, and a prefix that makes valid Lease names: lowercase letters, digits,
    /// `-` and `.`, starting and ending with a letter or digit, at most 200 characters.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.identity.is_empty() {
            return Err(ConfigError::NoIdentity);
        }
        if self.shards == 0 {
            return Err(ConfigError::NoShards);
        }
        if self.shards > MAX_SHARDS {
            return Err(ConfigError::TooManyShards(self.shards));
        }
        let name = self.name.as_bytes();
        let edge = |b: Option<&u8>| b.is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
        let inner =
            |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-' || *b == b'.';
        if name.len() > 200 || !edge(name.first()) || !edge(name.last()) || !name.iter().all(inner)
        {
            return Err(ConfigError::BadLeasePrefix(self.name.clone()));
        }
        self.timings.validate()
    }

    /// The name of this replica's membership Lease.
    pub fn member_lease(&self) -> String {
        format!(
            "{}{:016x}",
            self.member_prefix(),
            informer_shard::hash(&self.identity)
        )
    }

    /// The name of shard `shard`'s Lease.
    pub fn shard_lease(&self, shard: u32) -> String {
        format!("{}{shard}", self.shard_lease_prefix())
    }

    /// What every membership Lease's name starts with.
    fn member_prefix(&self) -> String {
        format!("{}-member-", self.name)
    }

    /// What every shard Lease's name starts with.
    fn shard_lease_prefix(&self) -> String {
        format!("{}-shard-", self.name)
    }

    /// What every Lease's name starts with.
    fn lease_prefix(&self) -> String {
        format!("{}-", self.name)
    }
}

/// What a replica knows of the assignment.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ShardStatus {
    /// The shards whose term is current here.
    pub owned: BTreeSet<u32>,
    /// Whether this replica holds its membership Lease.
    pub member: bool,
    /// The live members it last saw (itself included while a member), sorted.
    pub members: Vec<String>,
}

/// Counts for metrics: how many shards a replica owns, and how many moved in and out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ShardStats {
    /// Shards owned now.
    pub owned: u32,
    /// Terms started (shards moved in).
    pub started: u64,
    /// Terms ended by a hand-over: the consumer acknowledged, the Lease was released (shards
    /// moved out gracefully).
    pub handed_off: u64,
    /// Terms cut at the renew deadline or by finding the Lease taken (shards moved out by a
    /// fault).
    pub lost: u64,
}
