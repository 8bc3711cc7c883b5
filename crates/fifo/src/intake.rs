//! What both queues do to an object on its way in: compute its key, then transform it; and
//! where the objects they refuse are reported.

use std::fmt;
use std::sync::Arc;

use informer_store::{BoxError, KeyFunc, KnownObjects, ReplaceParts, call_key_func, catch_panic};

use crate::error::{Error, Result};
use crate::queue::{RefusalHandler, TransformFunc};
use crate::shared::InFlight;

/// A queue's key function, optional transform, optional cache and refusal handler.
pub(crate) struct Intake<K> {
    pub(crate) key_func: KeyFunc<K>,
    pub(crate) known_objects: Option<Arc<dyn KnownObjects<K>>>,
    pub(crate) transform: Option<TransformFunc<K>>,
    pub(crate) on_refused: Option<RefusalHandler>,
}

impl<K> Intake<K> {
    /// The key of `obj`; a failing or panicking key function is reported and returned.
    pub(crate) fn key(&self, obj: &K) -> Result<String> {
        call_key_func(&self.key_func, obj).map_err(|e| self.refuse(Error::Key(e)))
    }

    /// The transformed object; a failing or panicking transform is returned, not reported (the
    /// caller first withdraws the key's stale state, then reports).
    pub(crate) fn transform(&self, key: &str, obj: Arc<K>) -> Result<Arc<K>> {
        let Some(transform) = &self.transform else {
            return Ok(obj);
        };
        catch_panic(|| transform(obj))
            .unwrap_or_else(|panicked| Err(Box::new(panicked) as BoxError))
            .map_err(|source| Error::Transform {
                key: key.to_owned(),
                source,
            })
    }

    /// Key, then transform, for every object of a list: the objects refused are reported and
    /// left out, so one bad object never blocks the rest of a relist.
    pub(crate) fn admit_listed(&self, list: Vec<Arc<K>>) -> Vec<(String, Arc<K>)> {
        let mut listed = Vec::with_capacity(list.len());
        for obj in list {
            let Ok(key) = self.key(&obj) else {
                continue;
            };
            match self.transform(&key, obj) {
                Ok(obj) => listed.push((key, obj)),
                Err(err) => {
                    self.refuse(err);
                }
            }
        }
        listed
    }

    /// The first half of a queue's `replace_part`: the part admitted as
    /// [`admit_listed`](Self::admit_listed) admits a list, its keys noted in `parts`. A queue
    /// applies every part as it comes, the initial list's too (its `has_synced` waits for the
    /// end: see [`Guarded::replaced_in_parts`](crate::shared::Guarded::replaced_in_parts));
    /// `None` only if the parts were decided held before the first came here.
    pub(crate) fn admit_part(
        &self,
        part: Vec<Arc<K>>,
        parts: &mut ReplaceParts<K>,
    ) -> Option<Vec<(String, Arc<K>)>> {
        if !parts.decide(true) {
            parts.hold(part);
            return None;
        }
        let listed = self.admit_listed(part);
        for (key, _) in &listed {
            parts.note_listed(key);
        }
        Some(listed)
    }

    /// Reports a refused object to the refusal handler (or, with none, through `tracing`), and
    /// hands the error back.
    pub(crate) fn refuse(&self, err: Error) -> Error {
        match &self.on_refused {
            Some(handler) => handler(&err),
            None => tracing::warn!(key = err.key(), error = %err, "queue refused an object"),
        }
        err
    }

    /// The cache's object for `key`, if there is a cache and it has one, as the cache will be
    /// once the changes in flight are applied: a key in flight is read from `in_flight` (its
    /// newest object, or none after a deletion), not from the cache, which may not have it yet.
    pub(crate) fn known(&self, in_flight: &InFlight<K>, key: &str) -> Option<Arc<K>> {
        let known = self.known_objects.as_ref()?;
        match in_flight.get(key) {
            Some(last) => last.cloned(),
            None => known.get_by_key(key),
        }
    }
}

impl<K> fmt::Debug for Intake<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Intake")
            .field("known_objects", &self.known_objects.is_some())
            .field("transform", &self.transform.is_some())
            .field("on_refused", &self.on_refused.is_some())
            .finish()
    }
}
