//! What a reconcile wrote, for the next reconcile of its key to wait for: per cache, the latest
//! resource version the server's answers carried, and the objects deleted (by UID) that the
//! cache must drop.
//!
//! The controller runs each reconcile inside a record of its own (a task-local): a write made
//! through [`Client`](crate::Client) in the reconcile's task (and the futures it awaits, joined
//! or not) lands there. Once the reconcile ends, the record is kept for its key in the
//! controller's [gate](crate::gate), which the key's next reconcile waits on.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use informer::{VersionWaitError, compare_versions};
use parking_lot::Mutex;

/// An informer's cache, its type erased: what a written version or a deletion is awaited in.
pub(crate) trait WrittenCache: Send + Sync {
    /// The informer's name, for logs.
    fn name(&self) -> &str;
    /// The resource version of the last change the cache applied (`""` before the first).
    fn version(&self) -> String;
    /// [`SharedIndexInformer::wait_for_version`](informer::SharedIndexInformer::wait_for_version).
    fn wait_for_version<'a>(
        &'a self,
        version: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<String, VersionWaitError>>;
    /// Whether the cache holds, under `key`, the object whose UID is `uid`.
    fn holds(&self, key: &str, uid: &str) -> bool;
}

/// Whether `a` and `b` are the same cache.
fn same(a: &Arc<dyn WrittenCache>, b: &Arc<dyn WrittenCache>) -> bool {
    std::ptr::addr_eq(Arc::as_ptr(a), Arc::as_ptr(b))
}

/// A deleted object the cache must drop.
#[derive(Clone)]
pub(crate) struct Gone {
    pub(crate) cache: Arc<dyn WrittenCache>,
    pub(crate) key: String,
    pub(crate) uid: String,
}

/// What one reconcile (or several of one key not yet awaited) wrote.
#[derive(Clone, Default)]
pub(crate) struct Written {
    /// Per cache, the latest version written (one entry per cache).
    pub(crate) versions: Vec<(Arc<dyn WrittenCache>, String)>,
    /// The deleted objects to see leave their caches.
    pub(crate) gone: Vec<Gone>,
}

impl Written {
    /// A write to `cache`'s resource answered with `version`: kept if it is the cache's latest
    /// so far (or the versions cannot be compared: the last one is kept, and its wait will say
    /// it is not comparable).
    pub(crate) fn version(&mut self, cache: Arc<dyn WrittenCache>, version: String) {
        match self.versions.iter_mut().find(|(c, _)| same(c, &cache)) {
            Some((_, kept)) => {
                if compare_versions(kept, &version).is_none_or(|o| o.is_lt()) {
                    *kept = version;
                }
            }
            None => self.versions.push((cache, version)),
        }
    }

    /// The object `uid` at `key` was deleted: the cache must drop it.
    pub(crate) fn gone(&mut self, cache: Arc<dyn WrittenCache>, key: String, uid: String) {
        let known = self
            .gone
            .iter()
            .any(|g| same(&g.cache, &cache) && g.key == key && g.uid == uid);
        if !known {
            self.gone.push(Gone { cache, key, uid });
        }
    }

    /// Nothing written.
    pub(crate) fn is_empty(&self) -> bool {
        self.versions.is_empty() && self.gone.is_empty()
    }

    /// Adds what `other` wrote.
    pub(crate) fn merge(&mut self, other: Self) {
        for (cache, version) in other.versions {
            self.version(cache, version);
        }
        for g in other.gone {
            self.gone(g.cache, g.key, g.uid);
        }
    }

    /// Whether every cache shows it already, as far as a look tells (no wait): a version it
    /// cannot compare counts as shown, since no wait would be made for it.
    pub(crate) fn shown(&self) -> bool {
        let versions = self.versions.iter().all(|(cache, version)| {
            compare_versions(&cache.version(), version).is_none_or(|o| o.is_ge())
        });
        versions && self.gone.iter().all(|g| !g.cache.holds(&g.key, &g.uid))
    }
}

tokio::task_local! {
    /// The record of the reconcile running in this task.
    static WRITES: Arc<Mutex<Written>>;
}

/// Runs `reconcile` with its writes recorded in `into`.
pub(crate) async fn recording<F: Future>(into: Arc<Mutex<Written>>, reconcile: F) -> F::Output {
    WRITES.scope(into, reconcile).await
}

/// Whether this task runs a reconcile whose writes are recorded.
#[cfg_attr(not(feature = "kube"), allow(dead_code))]
pub(crate) fn in_reconcile() -> bool {
    WRITES.try_with(|_| ()).is_ok()
}

/// Records into the running reconcile's record; `false` outside a reconcile.
#[cfg_attr(not(feature = "kube"), allow(dead_code))]
pub(crate) fn record(write: impl FnOnce(&mut Written)) -> bool {
    WRITES.try_with(|w| write(&mut w.lock())).is_ok()
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    /// A cache whose version and content a test sets.
    #[derive(Default)]
    pub(crate) struct FakeCache {
        pub(crate) version: Mutex<String>,
        pub(crate) holds: AtomicBool,
    }

    impl WrittenCache for FakeCache {
        fn name(&self) -> &str {
            "fake"
        }
        fn version(&self) -> String {
            self.version.lock().clone()
        }
        fn wait_for_version<'a>(
            &'a self,
            version: &'a str,
            timeout: Duration,
        ) -> BoxFuture<'a, Result<String, VersionWaitError>> {
            let answer = match compare_versions(&self.version(), version) {
                None => Err(VersionWaitError::NotComparable {
                    wanted: version.to_owned(),
                    cached: self.version(),
                }),
                Some(o) if o.is_ge() => Ok(self.version()),
                Some(_) => Err(VersionWaitError::TimedOut {
                    wanted: version.to_owned(),
                    cached: self.version(),
                    waited: timeout,
                }),
            };
            Box::pin(async move { answer })
        }
        fn holds(&self, _key: &str, _uid: &str) -> bool {
            self.holds.load(Ordering::SeqCst)
        }
    }

    #[test]
    fn a_record_keeps_each_caches_latest_version_and_each_deletion_once() {
        let a: Arc<dyn WrittenCache> = Arc::new(FakeCache::default());
        let b: Arc<dyn WrittenCache> = Arc::new(FakeCache::default());
        let mut w = Written::default();
        w.version(Arc::clone(&a), "10".into());
        w.version(Arc::clone(&a), "9".into());
        w.version(Arc::clone(&b), "3".into());
        w.version(Arc::clone(&a), "11".into());
        let versions: Vec<&str> = w.versions.iter().map(|(_, v)| v.as_str()).collect();
        assert_eq!(versions, ["11", "3"]);
        // Not comparable: the last one is kept, for its wait to say so.
        w.version(Arc::clone(&b), "opaque".into());
        assert_eq!(w.versions[1].1, "opaque");
        w.gone(Arc::clone(&a), "ns/x".into(), "u1".into());
        let mut other = Written::default();
        other.gone(Arc::clone(&a), "ns/x".into(), "u1".into());
        other.version(Arc::clone(&a), "12".into());
        w.merge(other);
        assert_eq!(w.gone.len(), 1);
        assert_eq!(w.versions[0].1, "12");
    }

    #[tokio::test]
    async fn writes_are_recorded_only_inside_a_reconcile() {
        let cache: Arc<dyn WrittenCache> = Arc::new(FakeCache::default());
        assert!(!in_reconcile());
        assert!(!record(|w| w.version(Arc::clone(&cache), "1".into())));
        let into = Arc::new(Mutex::new(Written::default()));
        let recorded = recording(Arc::clone(&into), async {
            // Joined futures are part of the reconcile's task.
            let (a, b) = futures::join!(
                async { record(|w| w.version(Arc::clone(&cache), "2".into())) },
                async { record(|w| w.version(Arc::clone(&cache), "5".into())) },
            );
            a && b && in_reconcile()
        })
        .await;
        assert!(recorded);
        assert_eq!(into.lock().versions[0].1, "5");
    }
}
