//! Read-your-own-writes: the next reconcile of a key waits until the caches show what the
//! key's previous reconcile wrote through [`Client`](crate::Client) (see
//! [`Controller::read_your_writes`](crate::Controller::read_your_writes)).
//!
//! A written version is shown once its informer's cache has applied that version or a later
//! one ([`SharedIndexInformer::wait_for_version`](informer::SharedIndexInformer::wait_for_version));
//! a deleted object once its cache no longer holds its UID under its key. The wait is bounded:
//! at the timeout the reconcile runs anyway, on what the cache has, and the stale read is
//! counted ([`WritesAwaited::timed_out`]). A cache whose versions cannot be compared (a server
//! with opaque versions) is not waited for, and that is counted too
//! ([`WritesAwaited::not_comparable`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use informer::{VersionWaitError, compare_versions};
use parking_lot::Mutex;
use tokio::time::Instant;

use crate::WritesAwaited;
use crate::written::{Gone, Written, WrittenCache};

/// How long the next reconcile of a key waits for the caches to show what the previous one
/// wrote, by default (the wait controller-runtime's read-your-own-writes design proposes).
pub const READ_YOUR_WRITES_TIMEOUT: Duration = Duration::from_secs(5);

/// Below this many keys with writes not yet awaited, none are pruned.
const PRUNE_FROM: usize = 1024;

/// What each key's last reconcile wrote, until its next reconcile has waited for it.
pub(crate) struct Gate {
    timeout: Duration,
    pending: Mutex<Pending>,
}

struct Pending {
    by_key: HashMap<Arc<str>, Written>,
    /// Prune the records already shown once there are more than this many.
    prune_above: usize,
}

impl Gate {
    pub(crate) fn new(timeout: Duration) -> Self {
        Self {
            timeout,
            pending: Mutex::new(Pending {
                by_key: HashMap::new(),
                prune_above: PRUNE_FROM,
            }),
        }
    }

    /// Keeps what a reconcile of `key` wrote, for the key's next reconcile.
    pub(crate) fn keep(&self, key: &Arc<str>, written: Written) {
        if written.is_empty() {
            return;
        }
        let mut pending = self.pending.lock();
        match pending.by_key.get_mut(key) {
            Some(kept) => kept.merge(written),
            None => {
                pending.by_key.insert(Arc::clone(key), written);
            }
        }
        // Keys that are not reconciled again would keep their records forever: drop, now and
        // then, those their caches show already (their wait would end at once anyway).
        if pending.by_key.len() > pending.prune_above {
            pending.by_key.retain(|_, w| !w.shown());
            pending.prune_above = (2 * pending.by_key.len()).max(PRUNE_FROM);
        }
    }

    /// Waits, for at most the gate's timeout, until the caches show what the last reconcile of
    /// `key` wrote; `None` if it wrote nothing. Cancel-safe: dropped, the record stays for the
    /// next attempt.
    pub(crate) async fn wait(&self, key: &str) -> Option<WritesAwaited> {
        let written = self.pending.lock().by_key.get(key)?.clone();
        let awaited = awaited(&written, self.timeout).await;
        self.pending.lock().by_key.remove(key);
        if awaited.timed_out {
            tracing::debug!(
                key,
                waited = ?awaited.waited,
                "the caches have not shown the previous reconcile's writes: reconciling on a \
                 stale read"
            );
        }
        Some(awaited)
    }

    /// How many keys have writes not yet awaited.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.pending.lock().by_key.len()
    }
}

/// How a wait for one cache ended.
enum Shown {
    Yes,
    TimedOut,
    NotComparable,
    Stopped,
}

impl From<Result<String, VersionWaitError>> for Shown {
    fn from(answer: Result<String, VersionWaitError>) -> Self {
        match answer {
            Ok(_) => Self::Yes,
            Err(VersionWaitError::NotComparable { .. }) => Self::NotComparable,
            Err(VersionWaitError::Stopped { .. }) => Self::Stopped,
            Err(_) => Self::TimedOut,
        }
    }
}

/// Waits for every cache to show `written`, all within `timeout` (zero: a look, no wait).
async fn awaited(written: &Written, timeout: Duration) -> WritesAwaited {
    let started = Instant::now();
    // `None`: later than the clock can tell, never.
    let deadline = started.checked_add(timeout);
    let left = || {
        deadline.map_or(Duration::MAX, |d| {
            d.saturating_duration_since(Instant::now())
        })
    };
    let mut outcome = WritesAwaited {
        waited: Duration::ZERO,
        awaited: written.versions.len() + written.gone.len(),
        timed_out: false,
        not_comparable: false,
        stopped: false,
    };
    let mut note = |shown: Shown, cache: &dyn WrittenCache| match shown {
        Shown::Yes => {}
        Shown::TimedOut => outcome.timed_out = true,
        Shown::NotComparable => {
            tracing::debug!(
                informer = cache.name(),
                "resource versions that cannot be compared: not waiting for this cache"
            );
            outcome.not_comparable = true;
        }
        Shown::Stopped => outcome.stopped = true,
    };
    for (cache, version) in &written.versions {
        note(
            cache.wait_for_version(version, left()).await.into(),
            &**cache,
        );
    }
    for gone in &written.gone {
        note(dropped(gone, &left).await, &*gone.cache);
    }
    outcome.waited = started.elapsed();
    outcome
}

/// Waits until `gone.cache` no longer holds `gone.uid` under its key: at each change the cache
/// applies (a version past the one it is at), it looks again.
async fn dropped(gone: &Gone, left: &impl Fn() -> Duration) -> Shown {
    loop {
        if !gone.cache.holds(&gone.key, &gone.uid) {
            return Shown::Yes;
        }
        let Some(next) = successor(&gone.cache.version()) else {
            return Shown::NotComparable;
        };
        match Shown::from(gone.cache.wait_for_version(&next, left()).await) {
            Shown::Yes => {}
            // Dropped at the last moment: shown all the same.
            Shown::TimedOut if !gone.cache.holds(&gone.key, &gone.uid) => return Shown::Yes,
            other => return other,
        }
    }
}

/// The resource version right after `version` (a decimal integer of any length), `None` if it
/// is not one.
fn successor(version: &str) -> Option<String> {
    compare_versions(version, version)?;
    let mut digits = version.trim_start_matches('0').as_bytes().to_vec();
    let mut i = digits.len();
    loop {
        if i == 0 {
            digits.insert(0, b'1');
            break;
        }
        i -= 1;
        if digits[i] == b'9' {
            digits[i] = b'0';
        } else {
            digits[i] += 1;
            break;
        }
    }
    String::from_utf8(digits).ok()
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::*;
    use crate::written::tests::FakeCache;

    #[test]
    fn the_successor_of_a_version_is_the_next_integer() {
        assert_eq!(successor("0").as_deref(), Some("1"));
        assert_eq!(successor("41").as_deref(), Some("42"));
        assert_eq!(successor("199").as_deref(), Some("200"));
        assert_eq!(successor("0099").as_deref(), Some("100"));
        assert_eq!(
            successor("18446744073709551615").as_deref(),
            Some("18446744073709551616")
        );
        assert_eq!(successor(""), None);
        assert_eq!(successor("7a"), None);
    }

    fn cache(version: &str) -> Arc<FakeCache> {
        let cache = Arc::new(FakeCache::default());
        *cache.version.lock() = version.into();
        cache
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_reports_what_was_shown_and_what_was_not() {
        let gate = Gate::new(Duration::from_secs(2));
        let key: Arc<str> = Arc::from("ns/a");
        assert!(gate.wait(&key).await.is_none(), "nothing written");

        let (shown, behind, opaque) = (cache("10"), cache("3"), cache("v7"));
        let mut w = Written::default();
        w.version(shown.clone(), "10".into());
        gate.keep(&key, w.clone());
        let wait = gate.wait(&key).await.unwrap();
        assert!(!wait.timed_out && !wait.not_comparable && wait.awaited == 1);
        assert!(gate.wait(&key).await.is_none(), "awaited once");

        w.version(behind.clone(), "4".into());
        w.version(opaque.clone(), "v8".into());
        gate.keep(&key, w);
        let wait = gate.wait(&key).await.unwrap();
        assert!(wait.timed_out && wait.not_comparable);
        assert_eq!(wait.awaited, 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_deletion_is_shown_once_the_uid_has_left() {
        let gate = Gate::new(Duration::ZERO);
        let key: Arc<str> = Arc::from("ns/a");
        let c = cache("5");
        c.holds.store(true, Ordering::SeqCst);
        let mut w = Written::default();
        w.gone(c.clone(), "ns/child".into(), "u1".into());
        gate.keep(&key, w.clone());
        assert!(gate.wait(&key).await.unwrap().timed_out, "still held");
        c.holds.store(false, Ordering::SeqCst);
        gate.keep(&key, w);
        assert!(!gate.wait(&key).await.unwrap().timed_out, "gone");
    }

    #[tokio::test]
    async fn opaque_versions_are_not_waited_for_however_long_the_bound() {
        let gate = Gate::new(Duration::MAX);
        let key: Arc<str> = Arc::from("ns/a");
        let opaque = cache("etcd-7f3a");
        opaque.holds.store(true, Ordering::SeqCst);
        let mut w = Written::default();
        w.version(opaque.clone(), "etcd-7f3b".into());
        w.gone(opaque.clone(), "ns/child".into(), "u1".into());
        gate.keep(&key, w);
        // On the real clock: an answer at once, not after the bound.
        let wait = tokio::time::timeout(Duration::from_secs(60), gate.wait(&key))
            .await
            .expect("no wait")
            .unwrap();
        assert!(wait.not_comparable && !wait.timed_out);
        assert_eq!(wait.awaited, 2);
    }

    #[test]
    fn records_already_shown_are_pruned_as_keys_accumulate() {
        let gate = Gate::new(READ_YOUR_WRITES_TIMEOUT);
        let (shown, behind) = (cache("100"), cache("1"));
        for i in 0..=PRUNE_FROM {
            let mut w = Written::default();
            let c = if i % 2 == 0 { &shown } else { &behind };
            w.version(c.clone(), "50".into());
            gate.keep(&Arc::from(format!("ns/{i}")), w);
        }
        // Over the threshold: only the records behind their caches stay.
        assert_eq!(gate.len(), PRUNE_FROM / 2);
    }
}
