//! Leader election on a lease: of the replicas of a controller, one leads at a time.
//!
//! This is client-go's `tools/leaderelection` algorithm, async. Every candidate runs a
//! [`LeaderElector`] on one shared lock — on Kubernetes a `coordination.k8s.io/v1` Lease
//! ([`KubeLease`], feature `kube`, on by default) — which holds a [`LeaderRecord`]: the holder,
//! the lease duration, when it was acquired and renewed. All writes are compare-and-swap on the
//! record's version (the Lease's `resourceVersion`), so of two candidates writing at once one
//! wins and the other sees a lost race (409 Conflict), not an error.
//!
//! * **Acquire** when there is no record, the record is free (released), or the holder has not
//!   changed it for a whole lease duration — measured by the candidate's own clock from when it
//!   first saw that version of the record, never by comparing the record's timestamps with its
//!   clock, so clock offsets between replicas do not matter.
//! * **Renew** every retry period while leading. A leader that cannot renew for the renew
//!   deadline (counted from the start of its last successful renewal) stops leading then —
//!   `lease_duration - renew_deadline` before another candidate can take over, which absorbs
//!   clock-rate differences of up to `(lease − deadline) / (lease + deadline)` (20 % with the
//!   defaults).
//! * **Release** on a graceful stop: the record is freed, so a successor takes over at its next
//!   attempt (within a retry period) instead of after a lease duration.
//! * A candidate waits between attempts a random time between half the retry period and all of
//!   it, and never past the moment the lease it saw expires, so after a leader dies a successor
//!   leads within `lease_duration + retry_period` of the leader's last renewal (plus a request).
//!
//! Leading is a lease, not a fence: a leader that stalls (a long pause, a partition) can still
//! have writes in flight after it stopped leading, and a successor may start as early as
//! `lease_duration − renew_deadline` later. Writes that must not cross terms should carry a
//! precondition (a `resourceVersion`, optimistic concurrency) so that a stale leader's write is
//! refused, and work should be tied to the [`Term`], which ends the instant leading stops.
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//! use informer_leaderelection::{ElectionConfig, LeaderElector, MemoryLease};
//! use tokio_util::sync::CancellationToken;
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
//! let lease = MemoryLease::new(); // on Kubernetes: KubeLease::new(client, "default", "my-controller")
//! let a = LeaderElector::new(lease.clone(), ElectionConfig::new("replica-a")).unwrap();
//! let b = LeaderElector::new(lease.clone(), ElectionConfig::new("replica-b")).unwrap();
//! let (stop_a, stop_b) = (CancellationToken::new(), CancellationToken::new());
//! let running_a = tokio::spawn({ let (a, s) = (a.clone(), stop_a.clone()); async move { a.run(s).await } });
//! let term = a.leading().await; // a is first: it leads
//! tokio::spawn({ let (b, s) = (b.clone(), stop_b.clone()); async move { b.run(s).await } });
//!
//! tokio::time::sleep(Duration::from_secs(60)).await;
//! assert!(a.is_leader() && !b.is_leader(), "a renews; b waits");
//!
//! stop_a.cancel(); // a stops leading and releases the lease...
//! running_a.await.unwrap();
//! assert!(!term.is_current());
//! let next = b.leading().await; // ...and b takes over at its next attempt
//! assert_eq!(b.status().leader.as_deref(), Some("replica-b"));
//! # drop(next); stop_b.cancel();
//! # }
//! ```
//!
//! # Shards
//!
//! The same Leases can split work rather than elect one worker: with a [`ShardRunner`] per
//! replica, the replicas agree on which of them owns each of N shards of the hash space
//! (`informer_shard::ShardRange::shard(i, N)`), so that each caches and reconciles only its own.
//! Every replica holds a membership Lease; each shard has a Lease held by its owner with the
//! election's rules; the desired owner of a shard is chosen by rendezvous hashing over the live
//! members, so a replica joining or leaving moves only the shards it must. A shard changes
//! owner only after its previous owner's term ended: by a hand-over (the consumer drops the
//! shard's [`ShardTerm`], then the Lease is released) or at the renew deadline. The
//! [`shards`] module has the design and the reasons for it.
//!
//! ```
//! use std::time::Duration;
//! use informer_leaderelection::{MemoryLeases, ShardConfig, ShardRunner};
//! use tokio_util::sync::CancellationToken;
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
//! let leases = MemoryLeases::new(); // on Kubernetes: KubeLeases::new(client, "my-namespace")
//! let config = |identity| ShardConfig::new("my-controller", identity, 8);
//! let a = ShardRunner::new(leases.handle(), config("replica-a")).unwrap();
//! let b = ShardRunner::new(leases.handle(), config("replica-b")).unwrap();
//! let (stop_a, stop_b) = (CancellationToken::new(), CancellationToken::new());
//! let running_a = tokio::spawn({ let (a, s) = (a.clone(), stop_a.clone()); async move { a.run(s).await } });
//! tokio::time::sleep(Duration::from_secs(5)).await;
//! assert_eq!(a.status().owned.len(), 8, "alone, a owns every shard");
//!
//! // The consumer follows its shards (`a.subscribe()` tells of each change): a term per
//! // shard, held while working on it and dropped once that work has stopped.
//! let term = a.term(0).expect("a owns shard 0");
//! let work = tokio::spawn(async move {
//!     term.ended().await; // (work on the shard's objects until then)
//!     drop(term); // the work stopped: the shard may move
//! });
//!
//! tokio::spawn({ let (b, s) = (b.clone(), stop_b.clone()); async move { b.run(s).await } });
//! tokio::time::sleep(Duration::from_secs(10)).await;
//! let (mine, theirs) = (a.status().owned, b.status().owned);
//! assert_eq!(mine.len() + theirs.len(), 8, "b took the shards it weighs the most for");
//! assert!(mine.is_disjoint(&theirs) && !theirs.is_empty());
//!
//! stop_a.cancel(); // a hands every shard over, then leaves
//! running_a.await.unwrap();
//! work.await.unwrap();
//! tokio::time::sleep(Duration::from_secs(5)).await;
//! assert_eq!(b.status().owned.len(), 8);
//! assert_eq!(a.stats().handed_off, 8);
//! # stop_b.cancel();
//! # }
//! ```

mod attempt;
mod callbacks;
mod elector;
#[cfg(feature = "kube")]
mod kube;
mod lock;
pub mod shards;
mod store;

pub use crate::callbacks::{LeaderCallbackFuncs, LeaderCallbacks};
pub use crate::elector::{ConfigError, ElectionConfig, LeaderElector, Status, Term, Timings};
#[cfg(feature = "kube")]
pub use crate::kube::{KubeLease, KubeLeases};
pub use crate::lock::{LeaderRecord, LeaseLock, LockError, MemoryLease, Observed};
pub use crate::shards::{
    MAX_SHARDS, ShardConfig, ShardRunner, ShardStats, ShardStatus, ShardTerm, desired_owner,
    shard_weight,
};
pub use crate::store::{LeaseStore, MemoryLeases};
