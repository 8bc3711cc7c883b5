//! The one place locks come from: `parking_lot` normally, loom's models under
//! `--cfg informer_loom`.
//!
//! Both flavours offer the same small interface: a non-poisoning `Mutex` whose `lock` returns the
//! guard, and a `Condvar` whose `wait` takes the guard and gives it back.

#[cfg(not(informer_loom))]
pub(crate) use parking_lot::{Mutex, MutexGuard};

#[cfg(informer_loom)]
pub(crate) use self::loom_sync::{Mutex, MutexGuard};

/// A condition variable over [`Mutex`].
#[derive(Debug)]
pub(crate) struct Condvar(
    #[cfg(not(informer_loom))] parking_lot::Condvar,
    #[cfg(informer_loom)] loom::sync::Condvar,
);

impl Condvar {
    pub(crate) fn new() -> Self {
        #[cfg(not(informer_loom))]
        return Self(parking_lot::Condvar::new());
        #[cfg(informer_loom)]
        return Self(loom::sync::Condvar::new());
    }

    /// Releases the lock, waits for a notification, and takes the lock again.
    #[cfg(not(informer_loom))]
    pub(crate) fn wait<'a, T>(&self, mut guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
        self.0.wait(&mut guard);
        guard
    }

    /// Releases the lock, waits for a notification, and takes the lock again.
    #[cfg(informer_loom)]
    pub(crate) fn wait<'a, T>(&self, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
        self.0.wait(guard).unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn notify_one(&self) {
        self.0.notify_one();
    }

    pub(crate) fn notify_all(&self) {
        self.0.notify_all();
    }
}

#[cfg(informer_loom)]
mod loom_sync {
    pub(crate) use loom::sync::MutexGuard;

    /// loom's `Mutex` behind parking_lot's non-poisoning interface.
    #[derive(Debug)]
    pub(crate) struct Mutex<T>(loom::sync::Mutex<T>);

    impl<T> Mutex<T> {
        pub(crate) fn new(value: T) -> Self {
            Self(loom::sync::Mutex::new(value))
        }

        pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
            self.0.lock().unwrap_or_else(|e| e.into_inner())
        }
    }
}
