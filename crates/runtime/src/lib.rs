//! A reconciler over shared informers: the controller runtime of the informers stack.
//!
//! A [`Controller`] watches one informer's objects (its *main* informer) and any number of
//! related informers, turns every change into the key of an object to reconcile, and runs your
//! `reconcile` for each key on a rate-limited [`WorkQueue`] (client-go's `util/workqueue`):
//!
//! * **level-triggered**: `reconcile` gets the object as the cache has it when the key is
//!   dequeued ([`Target::Live`]), or [`Target::Deleted`] with its last known state — a deletion
//!   is a state to reconcile, not an error;
//! * **one key at a time**: up to [`concurrency`](Controller::concurrency) reconciles run at once,
//!   never two of one key; changes that arrive meanwhile coalesce into one more reconcile;
//! * **retries**: an error goes through your `error_policy` (by default a rate-limited retry:
//!   per-key exponential backoff from 5 ms, and an overall 10 per second); a success clears the
//!   key's backoff; [`Action::requeue`] reconciles again after a delay;
//! * **caches first**: no reconcile starts before every informer the controller reads from has
//!   synced and its initial state has been queued;
//! * **related objects**: [`owns`](Controller::owns) and [`watches`](Controller::watches) map a
//!   change of another informer's object to the keys to reconcile (an owner found through an
//!   index, say); a child deleted while a relist was in progress still wakes its owner, since a
//!   deletion always carries the child's last known state;
//! * **graceful shutdown**: on stop, no new reconcile starts; the ones under way get
//!   [`shutdown_timeout`](Controller::shutdown_timeout) to finish, then are cancelled; the
//!   controller's handlers are removed from the informers, which are shared and go on;
//! * **several replicas**: [`leader_election`](Controller::leader_election) puts the controller
//!   behind a [`LeaderElector`] (informer-leaderelection, on a Lease): it reconciles only while
//!   leading, stops the instant a term ends, and keeps its caches warm meanwhile (standing by,
//!   it queues nothing and remembers only its [latest deletions](Controller::standby_deletions),
//!   so its memory stays bounded however long it waits);
//! * **sharded replicas**: [`sharded`](Controller::sharded) splits the objects between the
//!   replicas by shard instead (a [`ShardRunner`] on Leases): each caches and reconciles only
//!   the shards it owns, begins each shard's term once its caches have listed the shard, with
//!   the shard's keys queued, and holds the
//!   shard's [`ShardTerm`] for every reconcile of its keys, which the term's end cancels, so an
//!   object is never reconciled by two replicas at once ([`Controller::shard_stats`] counts it
//!   per shard);
//! * **read-your-own-writes**: a reconcile of a key starts only once the caches show what the
//!   key's previous reconcile wrote through a [`Client`] (with the `kube` feature): every
//!   informer written to has applied the resource version the server answered with, and no
//!   deleted object's UID is still cached. The wait is bounded
//!   ([`read_your_writes`](Controller::read_your_writes), 5 s by default); past it the
//!   reconcile runs on what the caches have, and the stale read is counted
//!   ([`ReconcileObserver::writes_awaited`]);
//! * **writes not yet in the cache, counted**: [`Expectations`] records the children a
//!   reconcile created or deleted until the child informer has observed them, so that a
//!   reconcile run again meanwhile does not act on a cache that lags its own writes. It works
//!   where the gate above cannot (writes made without the [`Client`], a server whose resource
//!   versions cannot be compared), and the two agree: see the
//!   [`expectations`] module.
//!
//! With the `kube` feature (on by default), helpers for reconcilers of Kubernetes objects,
//! through kube-client:
//!
//! * [`predicates`] for [`Controller::predicate`]: `generation_changed`, `labels_changed`,
//!   `annotations_changed`, `finalizers_changed`;
//! * [`events::Recorder`] publishes Kubernetes Events (`events.k8s.io/v1`) about objects, with
//!   client-go's series for repeats;
//! * [`finalizer()`] runs a reconcile behind a finalizer: added first, the cleanup run when the
//!   object is being deleted, the finalizer removed once the cleanup succeeds;
//! * [`KubeLease`], the leader election's lock on a `coordination.k8s.io/v1` Lease;
//! * [`Client`], for reconcilers: reads from the informers' caches (`get`, `list`,
//!   `list_matching`, `by_index`, [`ClientError::NoInformer`] for a type it has no informer
//!   of), writes through kube-client (`create`, `replace`, `patch`, server-side `apply`,
//!   `patch_status`, `replace_status`, `apply_status`, `delete`), each answer's resource
//!   version (or a deleted object's UID) recorded for the read-your-own-writes gate; an
//!   apply's 409 Conflict is [`ClientError::ApplyConflict`].
//!
//! Without it, the crate knows nothing of Kubernetes' API: any object, any source.
//!
//! # Example
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use informer::SharedIndexInformer;
//! use informer_reflector::{FakeListerWatcher, ListPage};
//! use informer_runtime::{Action, Controller, Target};
//! use informer_store::{key_func, FnIdentity};
//! use tokio_util::sync::CancellationToken;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let source = Arc::new(FakeListerWatcher::<String>::new());
//! source.push_list(ListPage::new(vec![Arc::new("a".to_string()), Arc::new("b".to_string())], "1"));
//! let informer = Arc::new(SharedIndexInformer::new(
//!     source, FnIdentity::new(key_func(|s: &String| Ok(s.clone()))),
//! ));
//! let stop = CancellationToken::new();
//! let running = tokio::spawn({ let (i, s) = (informer.clone(), stop.clone()); async move { i.run(s).await } });
//!
//! let (seen_tx, mut seen) = tokio::sync::mpsc::unbounded_channel();
//! let controller = Controller::new(informer.clone()).concurrency(2);
//! let reconciling = tokio::spawn(controller.run(
//!     stop.clone(),
//!     Arc::new(seen_tx),
//!     |request, seen| async move {
//!         if let Target::Live(obj) = &request.target {
//!             seen.send(obj.to_string()).unwrap();
//!         }
//!         Ok::<_, std::convert::Infallible>(Action::await_change())
//!     },
//!     |_request, _error, _ctx| Action::backoff(),
//! ));
//! let mut names = vec![seen.recv().await.unwrap(), seen.recv().await.unwrap()];
//! names.sort();
//! assert_eq!(names, ["a", "b"]);
//! stop.cancel();
//! reconciling.await.unwrap().unwrap();
//! running.await.unwrap().unwrap();
//! # }
//! ```

mod action;
#[cfg(feature = "kube")]
mod client;
mod controller;
mod deleted;
mod error;
mod gate;
mod handlers;
mod observer;
mod request;
mod shards;
mod worker;
mod written;

#[cfg(feature = "kube")]
pub mod events;
pub mod expectations;
#[cfg(feature = "kube")]
mod finalizer;
#[cfg(feature = "kube")]
pub mod predicates;

pub use action::Action;
#[cfg(feature = "kube")]
pub use client::{Client, ClientError, ClientObject, ClientStats, Deletion, ObjectScope};
pub use controller::Controller;
pub use deleted::STANDBY_DELETIONS;
pub use error::RuntimeError;
pub use expectations::Expectations;
#[cfg(feature = "kube")]
pub use finalizer::{Finalize, FinalizerError, finalizer};
pub use gate::READ_YOUR_WRITES_TIMEOUT;
#[cfg(feature = "kube")]
pub use informer_leaderelection::KubeLease;
pub use informer_leaderelection::{
    LeaderElector, ShardConfig, ShardRunner, ShardStats, ShardTerm, Term,
};
pub use observer::{ReconcileObserver, ReconcileOutcome, WritesAwaited};
pub use request::{Request, Target};
pub use shards::{ControllerShardStats, SHARD_WAIT_WARNING, ShardCounts, ShardStatsHandle};

/// For the crate docs' link.
#[cfg(doc)]
use informer_workqueue::WorkQueue;
