//! The one place locks come from: `parking_lot` normally, loom's models under
//! `--cfg informer_loom`.

#[cfg(not(informer_loom))]
pub(crate) use parking_lot::RwLock;

#[cfg(informer_loom)]
pub(crate) use self::loom_rwlock::RwLock;

#[cfg(informer_loom)]
mod loom_rwlock {
    /// loom's `RwLock` behind parking_lot's non-poisoning interface.
    #[derive(Debug)]
    pub(crate) struct RwLock<T>(loom::sync::RwLock<T>);

    impl<T> RwLock<T> {
        pub(crate) fn new(value: T) -> Self {
            Self(loom::sync::RwLock::new(value))
        }

        pub(crate) fn read(&self) -> loom::sync::RwLockReadGuard<'_, T> {
            self.0.read().unwrap_or_else(|e| e.into_inner())
        }

        pub(crate) fn write(&self) -> loom::sync::RwLockWriteGuard<'_, T> {
            self.0.write().unwrap_or_else(|e| e.into_inner())
        }
    }
}
