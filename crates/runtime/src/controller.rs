//! The [`Controller`]: its parts, its configuration (`builder`), its run (`run`), and its terms
//! in a leader election (`election`).

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use informer::{InformerError, SharedIndexInformer};
use informer_leaderelection::LeaderElector;
use informer_workqueue::WorkQueue;
use parking_lot::{Mutex, RwLock};

use crate::deleted::Deleted;
use crate::handlers::{UpdatePredicate, Watched};
use crate::shards::{Placement, ShardSlot, Sharded};
use crate::{Expectations, ReconcileObserver};

mod builder;
mod election;
mod run;
mod sharded;

pub(crate) use sharded::ShardedInformer;

/// The keys one relation maps its informer's cached objects to; sharded, each with the
/// placement of the object that maps to it (hashed as its informer hashes).
type RelatedKeys = Box<dyn Fn(Option<&Sharded>) -> Vec<(String, Option<Placement>)> + Send + Sync>;

/// A reconciler over a main informer and related ones (see the crate docs).
pub struct Controller<K> {
    main: Arc<SharedIndexInformer<K>>,
    queue: WorkQueue<Arc<str>>,
    deleted: Arc<Mutex<Deleted<K>>>,
    /// Whether changes are queued: always without an election, within terms with one.
    reconciling: Arc<AtomicBool>,
    /// Those of `owns_expecting`, dropped for an object when it is deleted.
    expectations: Arc<Mutex<Vec<Expectations>>>,
    /// Which updates of the main informer's objects are queued.
    predicate: Arc<RwLock<Option<UpdatePredicate<K>>>>,
    watched: Vec<Result<Watched, InformerError>>,
    /// For each `owns`/`watches` relation, the keys its mapper gives for every object its
    /// informer caches now: what a new term queues besides the main informer's keys.
    related_keys: Vec<RelatedKeys>,
    concurrency: usize,
    shutdown_timeout: Duration,
    reconcile_timeout: Option<Duration>,
    /// How long a reconcile waits for the caches to show its key's previous writes.
    read_your_writes: Duration,
    elector: Option<LeaderElector>,
    observer: Option<Arc<dyn ReconcileObserver>>,
    /// The shard assignment, once [`sharded`](Self::sharded).
    sharding: ShardSlot,
    /// The main informer first, then every `owns`/`watches` one: what a sharded controller
    /// keeps at its shard set.
    informers: Vec<ShardedInformer>,
}

impl<K> fmt::Debug for Controller<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Controller")
            .field("main", &self.main)
            .field("queue", &self.queue)
            .field("watched", &self.watched.len())
            .field("concurrency", &self.concurrency)
            .finish()
    }
}
