//! The cache's resource version: the version of the last change the cache applied, moved by
//! every event as well as by every relist (client-go 1.35+'s `LastStoreSyncResourceVersion`
//! with `InformerResourceVersion`: the last write wins), and a wait for the cache to have seen
//! a version, the question read-your-own-writes asks.
//!
//! Since Kubernetes 1.35 the resource versions of one resource are comparable (KEP-5504): each
//! is a decimal integer, a later write's larger. [`compare_versions`] compares them so; a
//! version of any other shape (a server with opaque versions) is not comparable, and a wait
//! says so instead of guessing.

use std::cmp::Ordering;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering as AtomicOrdering};
use std::time::Duration;

use informer_fifo::Delta;
use informer_store::Identity;
use parking_lot::Mutex;

use crate::SharedIndexInformer;

/// Why [`SharedIndexInformer::wait_for_version`] returned without the cache having reached the
/// version.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum VersionWaitError {
    /// The version waited for, or the cache's, is not a decimal integer: the server's
    /// versions cannot be compared (Kubernetes before 1.35 does not promise they can).
    #[error("resource versions {wanted:?} and {cached:?} cannot be compared")]
    NotComparable {
        /// The version waited for.
        wanted: String,
        /// The cache's version when the wait gave up (`""`: none yet).
        cached: String,
    },
    /// The informer stopped (or never ran and was stopped) before its cache reached the version.
    #[error("the informer stopped before its cache reached resource version {wanted}")]
    Stopped {
        /// The version waited for.
        wanted: String,
    },
    /// The cache had not reached the version when the wait's time was up.
    #[error("the cache was at resource version {cached:?}, not yet {wanted}, after {waited:?}")]
    TimedOut {
        /// The version waited for.
        wanted: String,
        /// The cache's version then (`""`: none yet).
        cached: String,
        /// How long the wait lasted.
        waited: Duration,
    },
}

/// Compares two resource versions of one resource as Kubernetes 1.35+ documents them:
/// decimal integers (of any length; leading zeros are ignored). `None` if either is not one.
///
/// ```
/// use std::cmp::Ordering;
/// use informer::compare_versions;
///
/// assert_eq!(compare_versions("999", "1000"), Some(Ordering::Less));
/// assert_eq!(compare_versions("1000", "1000"), Some(Ordering::Equal));
/// assert_eq!(compare_versions("opaque-7", "1000"), None);
/// ```
pub fn compare_versions(a: &str, b: &str) -> Option<Ordering> {
    fn digits(v: &str) -> Option<&str> {
        if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        Some(v.trim_start_matches('0'))
    }
    let (a, b) = (digits(a)?, digits(b)?);
    Some(a.len().cmp(&b.len()).then_with(|| a.cmp(b)))
}

/// The cache's version and who waits on it.
#[derive(Debug, Default)]
pub(crate) struct CacheVersion {
    current: Mutex<String>,
    /// Moved since waiters were last woken.
    moved: AtomicBool,
    /// Version waits in progress: the pop loop wakes waits only when there are some.
    waiting: AtomicUsize,
}

impl CacheVersion {
    /// The version now (`""` before the first change).
    pub(crate) fn get(&self) -> String {
        self.current.lock().clone()
    }

    /// Records `version` as the cache's (the last write wins).
    fn set(&self, version: &str) {
        let mut current = self.current.lock();
        if *current != version {
            version.clone_into(&mut current);
            self.moved.store(true, AtomicOrdering::Relaxed);
        }
    }

    /// Whether the version moved since the last call, with a wait in progress to tell.
    pub(crate) fn take_moved(&self) -> bool {
        self.moved.swap(false, AtomicOrdering::Relaxed)
            && self.waiting.load(AtomicOrdering::SeqCst) > 0
    }
}

/// What moves the cache's version, noted as the changes of one pop go by.
pub(crate) enum VersionOf<K> {
    /// The object an event carried (added, updated, deleted with its final state, or listed
    /// by a queue that spells a relist out per object).
    Object(Arc<K>),
    /// A relist applied in one step, at its list's version.
    List(String),
}

impl<K: 'static> VersionOf<K> {
    /// What `delta` moves the version to, if anything. A resync re-delivers cached versions and
    /// a tombstone holds at most an old one: neither moves it.
    pub(crate) fn of(delta: &Delta<K>) -> Option<Self> {
        match delta {
            Delta::Added(obj) | Delta::Updated(obj) | Delta::Replaced(obj) => {
                Some(Self::Object(Arc::clone(obj)))
            }
            Delta::Deleted(deleted) if !deleted.is_tombstone() => {
                deleted.object().map(|obj| Self::Object(Arc::clone(obj)))
            }
            Delta::ReplacedAll(all) => Some(Self::List(all.resource_version().to_owned())),
            Delta::Deleted(_) | Delta::Sync(_) | Delta::SyncAll => None,
        }
    }

    /// Records it as the cache's version, reading an object's through `identity`.
    pub(crate) fn record(self, identity: &dyn Identity<K>, version: &CacheVersion) {
        match self {
            Self::Object(obj) => {
                if let Some(rv) = identity.resource_version(&obj) {
                    version.set(rv);
                }
            }
            Self::List(rv) => version.set(&rv),
        }
    }
}

/// A version wait in progress, counted while it lasts.
struct Waiting<'a>(&'a CacheVersion);

impl<'a> Waiting<'a> {
    fn new(version: &'a CacheVersion) -> Self {
        version.waiting.fetch_add(1, AtomicOrdering::SeqCst);
        Self(version)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, AtomicOrdering::SeqCst);
    }
}

impl<K> SharedIndexInformer<K>
where
    K: Send + Sync + 'static,
{
    /// The resource version of the last change the cache applied: an event's object's, or a
    /// relist's (client-go's `LastStoreSyncResourceVersion`; `""` before the first). Unlike
    /// [`last_sync_resource_version`](Self::last_sync_resource_version), the version the
    /// reflector resumes from, it tells what the cache reflects: a change the reflector has
    /// received may still wait in the queue.
    pub fn cache_version(&self) -> String {
        self.version.get()
    }

    /// Waits until the cache has applied resource version `version` of its resource or a later
    /// one (as [`compare_versions`] orders them), for at most `timeout`; returns the cache's
    /// version then. Cancel-safe.
    ///
    /// A write's returned version is reached once the cache has applied the write's own event,
    /// a later event or a later relist; a bookmark does not move the cache's version, so a
    /// write this informer does not see (outside its selectors) is reached by the next change
    /// it sees. The answers: [`NotComparable`](VersionWaitError::NotComparable) at once when
    /// either version is not a decimal integer, [`Stopped`](VersionWaitError::Stopped) at once
    /// when the informer has stopped, [`TimedOut`](VersionWaitError::TimedOut) when time is up.
    pub async fn wait_for_version(
        &self,
        version: &str,
        timeout: Duration,
    ) -> Result<String, VersionWaitError> {
        if compare_versions(version, version).is_none() {
            return Err(VersionWaitError::NotComparable {
                wanted: version.to_owned(),
                cached: self.cache_version(),
            });
        }
        let _waiting = Waiting::new(&self.version);
        // Reached, or known never to be: an answer.
        let answered = || {
            let cached = self.version.get();
            !cached.is_empty()
                && compare_versions(&cached, version).is_none_or(|o| o != Ordering::Less)
        };
        let started = tokio::time::Instant::now();
        let waited = tokio::time::timeout(timeout, async {
            loop {
                self.upstream
                    .wait(answered, || self.upstream.is_stopped())
                    .await;
                // `None` if the version moved back since the look (a DeltaFifo's relist spells
                // itself out per object, older versions included): wait on.
                if let Some(answer) = self.version_answer(version) {
                    return answer;
                }
            }
        })
        .await;
        waited.unwrap_or_else(|_| {
            self.version_answer(version).unwrap_or_else(|| {
                Err(VersionWaitError::TimedOut {
                    wanted: version.to_owned(),
                    cached: self.version.get(),
                    waited: started.elapsed(),
                })
            })
        })
    }

    /// The answer to a wait for `version` now: reached, not comparable, or stopped; `None` while
    /// the cache is behind it.
    fn version_answer(&self, version: &str) -> Option<Result<String, VersionWaitError>> {
        let cached = self.version.get();
        match compare_versions(&cached, version) {
            Some(Ordering::Equal | Ordering::Greater) => Some(Ok(cached)),
            None if !cached.is_empty() => Some(Err(VersionWaitError::NotComparable {
                wanted: version.to_owned(),
                cached,
            })),
            _ if self.upstream.is_stopped() => Some(Err(VersionWaitError::Stopped {
                wanted: version.to_owned(),
            })),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// Against the integers they spell, leading zeros and all.
        #[test]
        fn versions_compare_as_the_integers_they_spell(
            a in any::<u128>(), b in any::<u128>(), za in 0usize..3, zb in 0usize..3,
        ) {
            let spell = |n: u128, zeros: usize| format!("{}{n}", "0".repeat(zeros));
            prop_assert_eq!(compare_versions(&spell(a, za), &spell(b, zb)), Some(a.cmp(&b)));
        }

        /// Anything that is not all digits is not comparable, either way round.
        #[test]
        fn anything_else_is_not_comparable(a in "[0-9]{0,4}[^0-9][0-9a-z]{0,4}|", b in any::<u64>()) {
            let b = b.to_string();
            prop_assert_eq!(compare_versions(&a, &b), None);
            prop_assert_eq!(compare_versions(&b, &a), None);
        }
    }
}
