//! [`CacheSyncReport`]: what `wait_for_cache_sync` found.

use std::fmt;

use informer_reflector::Availability;

use crate::entry::describe;
use crate::source::Selection;

/// The state of one of a factory's informers.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct InformerStatus {
    /// The resource type requested (its Rust type name).
    pub resource: &'static str,
    /// For an informer asked for with
    /// [`informer_for`](crate::SharedInformerFactory::informer_for): the resource, as its
    /// value displays it (`resource` is then the value's type).
    pub dynamic: Option<String>,
    /// What the informer lists and watches.
    pub selection: Selection,
    /// The name of its transform, if any.
    pub transform: Option<String>,
    /// Whether the factory has started it.
    pub started: bool,
    /// Whether it has synced (its first list is in the cache and in every handler's buffer).
    pub synced: bool,
    /// Whether it has stopped.
    pub stopped: bool,
    /// Whether the server serves its resource, as its last list found
    /// ([`Availability::NotServed`]: answered `404 NotFound`, the informer waits for it).
    pub availability: Availability,
}

impl InformerStatus {
    /// Whether the server does not serve its resource now.
    pub fn is_not_served(&self) -> bool {
        self.availability == Availability::NotServed
    }
}

impl fmt::Display for InformerStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let not_served = self.is_not_served();
        let state = match (self.started, self.synced, self.stopped) {
            (false, _, _) => "not started",
            (_, true, false) if not_served => "synced, no longer served",
            (_, false, false) if not_served => "not served",
            (_, _, true) if not_served => "stopped, no longer served",
            (_, true, false) => "synced",
            (_, true, true) => "synced, stopped",
            (_, false, true) => "stopped before syncing",
            (_, false, false) => "not synced",
        };
        write!(
            f,
            "{}: {state}",
            describe(
                self.dynamic.as_deref().unwrap_or(self.resource),
                &self.selection,
                self.transform.as_deref()
            )
        )
    }
}

/// Which of a factory's started informers have synced (client-go's `WaitForCacheSync` map).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CacheSyncReport {
    /// Every started informer, in the order it was first requested.
    pub informers: Vec<InformerStatus>,
}

impl CacheSyncReport {
    /// Whether every started informer has synced (true when none was started).
    pub fn all_synced(&self) -> bool {
        self.informers.iter().all(|i| i.synced)
    }

    /// The informers that have not synced.
    pub fn unsynced(&self) -> impl Iterator<Item = &InformerStatus> {
        self.informers.iter().filter(|i| !i.synced)
    }

    /// The informers whose resource the server does not serve (they wait for it).
    pub fn not_served(&self) -> impl Iterator<Item = &InformerStatus> {
        self.informers.iter().filter(|i| i.is_not_served())
    }

    /// Whether every started informer whose resource the server serves has synced: what
    /// [`wait_for_cache_sync_served`](crate::SharedInformerFactory::wait_for_cache_sync_served)
    /// waits for.
    pub fn all_served_synced(&self) -> bool {
        self.informers.iter().all(|i| i.synced || i.is_not_served())
    }

    /// Whether the informer of resource `R` with `selection` has synced; `None` if no such
    /// informer was started.
    pub fn is_synced<R: ?Sized>(&self, selection: &Selection) -> Option<bool> {
        let resource = std::any::type_name::<R>();
        self.informers
            .iter()
            .find(|i| i.resource == resource && &i.selection == selection)
            .map(|i| i.synced)
    }

    /// Whether the informer of the resource named at run time by `resource` (see
    /// [`informer_for`](crate::SharedInformerFactory::informer_for)) with `selection` has
    /// synced; `None` if no such informer was started.
    pub fn is_synced_for<P: fmt::Display>(
        &self,
        resource: &P,
        selection: &Selection,
    ) -> Option<bool> {
        let (ty, name) = (std::any::type_name::<P>(), resource.to_string());
        self.informers
            .iter()
            .find(|i| {
                i.resource == ty
                    && i.dynamic.as_deref() == Some(&*name)
                    && &i.selection == selection
            })
            .map(|i| i.synced)
    }
}

impl fmt::Display for CacheSyncReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let synced = self.informers.iter().filter(|i| i.synced).count();
        write!(f, "{synced}/{} informers synced", self.informers.len())?;
        for informer in self.unsynced() {
            write!(f, "; {informer}")?;
        }
        Ok(())
    }
}
