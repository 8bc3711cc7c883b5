//! [`ReplacedAll`]: a relist as one change, for a consumer that applies it to its cache in one
//! step.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use foldhash::fast::RandomState;
use informer_store::KnownObjects;

use crate::delta::Delta;

/// A relist of the whole collection, queued as one change by an atomic
/// [`InOrderFifo`](crate::InOrderFifo) (client-go's `ReplacedAllInfo`): what the consumer's cache
/// becomes.
///
/// The queue does not read the cache to find what the list lacks: the consumer, which applies
/// the changes in order, compares the list with its cache as it is when this change comes up
/// (every change queued before it applied), replaces the cache's content with the list in one
/// step, and then tells its handlers what changed: [`changes`](Self::changes) lists it as the
/// per-object deltas a non-atomic queue would have queued.
///
/// A relist applied page by page ([`ReflectorStore::replace_part`](informer_store::ReflectorStore::replace_part))
/// queues its pages as [`Replaced`](Delta::Replaced) deltas as they arrive and ends with a
/// `ReplacedAll` that holds no object but the keys the pages listed
/// ([`is_by_pages`](Self::is_by_pages)): the consumer then deletes what no page listed. Such a
/// relist is not applied in one step (that is what it trades for its lower peak memory).
pub struct ReplacedAll<K> {
    objects: Vec<(String, Arc<K>)>,
    resource_version: String,
    listed_by_pages: Option<HashSet<String>>,
}

impl<K> ReplacedAll<K> {
    /// A whole list: `objects` with their keys, in list order, reported at `resource_version`.
    pub fn new(objects: Vec<(String, Arc<K>)>, resource_version: String) -> Self {
        Self {
            objects,
            resource_version,
            listed_by_pages: None,
        }
    }

    /// The end of a relist applied page by page: its pages, already queued, listed the keys
    /// `listed`; every other key is gone.
    pub fn after_pages(listed: HashSet<String>, resource_version: String) -> Self {
        Self {
            objects: Vec::new(),
            resource_version,
            listed_by_pages: Some(listed),
        }
    }

    /// The listed objects with their keys, in list order (empty at the end of a relist by
    /// page). A key listed twice appears twice; the last object wins.
    pub fn objects(&self) -> &[(String, Arc<K>)] {
        &self.objects
    }

    /// The resource version the list was reported at.
    pub fn resource_version(&self) -> &str {
        &self.resource_version
    }

    /// Whether this ends a relist applied page by page (see the type's docs).
    pub fn is_by_pages(&self) -> bool {
        self.listed_by_pages.is_some()
    }

    /// Whether the pages before this change listed `key` (never, for a whole list).
    pub fn listed_by_pages(&self, key: &str) -> bool {
        self.listed_by_pages
            .as_ref()
            .is_some_and(|listed| listed.contains(key))
    }

    /// The objects and the resource version, owned.
    pub fn into_parts(self) -> (Vec<(String, Arc<K>)>, String) {
        (self.objects, self.resource_version)
    }

    /// The newest state this change gives `key`: `Some(Some(obj))` if listed (the last of its
    /// objects), `Some(None)` if it deletes the key, `None` if it leaves the key as it was (a
    /// key an earlier page of a relist by page listed).
    pub fn state_of(&self, key: &str) -> Option<Option<&Arc<K>>> {
        match self.objects.iter().rev().find(|(k, _)| k == key) {
            Some((_, obj)) => Some(Some(obj)),
            None if self.listed_by_pages(key) => None,
            None => Some(None),
        }
    }

    /// What this change does to a cache holding `cache`'s content, as per-object deltas in the
    /// order a non-atomic queue delivers them: a [`Deleted`](Delta::Deleted) tombstone carrying
    /// the cached object for every cached key the relist lacks (in `cache`'s key order), then
    /// [`Replaced`](Delta::Replaced) for every listed object, in list order.
    pub fn changes<C>(&self, cache: &C) -> Vec<(String, Delta<K>)>
    where
        C: KnownObjects<K> + ?Sized,
    {
        let listed: HashSet<&str, RandomState> =
            self.objects.iter().map(|(key, _)| key.as_str()).collect();
        let mut changes: Vec<(String, Delta<K>)> = Vec::new();
        for key in cache.list_keys() {
            if listed.contains(key.as_str()) || self.listed_by_pages(&key) {
                continue;
            }
            if let Some(obj) = cache.get_by_key(&key) {
                let tombstone = Delta::tombstone(key.as_str(), Some(obj));
                changes.push((key, tombstone));
            }
        }
        drop(listed);
        changes.extend(
            self.objects
                .iter()
                .map(|(key, obj)| (key.clone(), Delta::Replaced(Arc::clone(obj)))),
        );
        changes
    }
}

/// What a resync of the whole cache ([`Delta::SyncAll`]) re-delivers from a cache holding
/// `cache`'s content: a [`Sync`](Delta::Sync) delta for every cached object, in `cache`'s key
/// order.
pub fn sync_all_changes<K, C>(cache: &C) -> Vec<(String, Delta<K>)>
where
    C: KnownObjects<K> + ?Sized,
{
    cache
        .list_keys()
        .into_iter()
        .filter_map(|key| cache.get_by_key(&key).map(|obj| (key, Delta::Sync(obj))))
        .collect()
}

impl<K> Clone for ReplacedAll<K> {
    fn clone(&self) -> Self {
        Self {
            objects: self.objects.clone(),
            resource_version: self.resource_version.clone(),
            listed_by_pages: self.listed_by_pages.clone(),
        }
    }
}

impl<K: PartialEq> PartialEq for ReplacedAll<K> {
    fn eq(&self, other: &Self) -> bool {
        self.objects == other.objects
            && self.resource_version == other.resource_version
            && self.listed_by_pages == other.listed_by_pages
    }
}

impl<K: Eq> Eq for ReplacedAll<K> {}

impl<K: fmt::Debug> fmt::Debug for ReplacedAll<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = f.debug_struct("ReplacedAll");
        s.field("objects", &self.objects)
            .field("resource_version", &self.resource_version);
        if let Some(listed) = &self.listed_by_pages {
            let mut listed: Vec<&String> = listed.iter().collect();
            listed.sort();
            s.field("listed_by_pages", &listed);
        }
        s.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    struct Cache(BTreeMap<String, Arc<u32>>);

    impl KnownObjects<u32> for Cache {
        fn list_keys(&self) -> Vec<String> {
            self.0.keys().cloned().collect()
        }
        fn get_by_key(&self, key: &str) -> Option<Arc<u32>> {
            self.0.get(key).cloned()
        }
    }

    fn cache(entries: &[(&str, u32)]) -> Cache {
        Cache(
            entries
                .iter()
                .map(|(k, v)| ((*k).to_owned(), Arc::new(*v)))
                .collect(),
        )
    }

    fn listed(entries: &[(&str, u32)]) -> Vec<(String, Arc<u32>)> {
        entries
            .iter()
            .map(|(k, v)| ((*k).to_owned(), Arc::new(*v)))
            .collect()
    }

    #[test]
    fn changes_are_the_deletions_then_the_list_in_order() {
        let all = ReplacedAll::new(listed(&[("c", 3), ("a", 4)]), "9".into());
        let changes = all.changes(&cache(&[("a", 1), ("b", 2)]));
        assert_eq!(
            changes,
            [
                ("b".to_owned(), Delta::tombstone("b", Some(Arc::new(2)))),
                ("c".to_owned(), Delta::Replaced(Arc::new(3))),
                ("a".to_owned(), Delta::Replaced(Arc::new(4))),
            ]
        );
        assert_eq!(all.state_of("a"), Some(Some(&Arc::new(4))));
        assert_eq!(all.state_of("b"), Some(None));
    }

    #[test]
    fn the_end_of_a_relist_by_page_deletes_only_what_no_page_listed() {
        let listed: HashSet<String> = ["a".to_owned()].into();
        let end = ReplacedAll::<u32>::after_pages(listed, "9".into());
        assert!(end.is_by_pages());
        assert_eq!(
            end.changes(&cache(&[("a", 1), ("b", 2)])),
            [("b".to_owned(), Delta::tombstone("b", Some(Arc::new(2))))]
        );
        assert_eq!(end.state_of("a"), None, "left as the pages made it");
        assert_eq!(end.state_of("b"), Some(None));
    }

    #[test]
    fn a_resync_of_the_whole_cache_syncs_every_object() {
        assert_eq!(
            sync_all_changes(&cache(&[("a", 1), ("b", 2)])),
            [
                ("a".to_owned(), Delta::Sync(Arc::new(1))),
                ("b".to_owned(), Delta::Sync(Arc::new(2))),
            ]
        );
    }
}
