//! Transforms that trim objects before they are cached.

use std::sync::Arc;

use informer_fifo::{TransformFunc, transform_func};
use kube::Resource;

/// A transform that drops `metadata.managedFields` (client-go's `TransformStripManagedFields`).
///
/// Server-side apply records, per field manager, which fields it owns: often a kilobyte or more
/// per object, and read by almost no controller. Stripping it before the object is queued means
/// the cache, the queue and every notification share the smaller object. An object that has no
/// managed fields is passed through as it is; one that nobody else holds (as a decoder hands it
/// over) is changed in place; only a shared one is copied first.
///
/// When the objects come from this crate's lister-watchers, prefer leaving the managed fields
/// out while decoding ([`KubeListerWatcher::without_managed_fields`](crate::KubeListerWatcher::without_managed_fields),
/// [`KubeSource::without_managed_fields`](crate::KubeSource::without_managed_fields)): the cache
/// is the same, but nothing is built only to be freed. This transform decodes every `fieldsV1`
/// tree and then frees it, which on a pod with a few managers costs more time than it saves
/// (`docs/benchmarks.md`, W-HTTP on realistic pods). It remains the way for objects from any
/// other source.
///
/// ```
/// use std::sync::Arc;
///
/// use informer_kube::strip_managed_fields;
/// use k8s_openapi::api::core::v1::Pod;
/// use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
/// use kube::api::ObjectMeta;
///
/// let pod = Pod {
///     metadata: ObjectMeta {
///         name: Some("web-0".into()),
///         managed_fields: Some(vec![ManagedFieldsEntry::default()]),
///         ..Default::default()
///     },
///     ..Default::default()
/// };
/// let stripped = strip_managed_fields::<Pod>()(Arc::new(pod)).unwrap();
/// assert_eq!(stripped.metadata.managed_fields, None);
/// assert_eq!(stripped.metadata.name.as_deref(), Some("web-0"));
/// ```
pub fn strip_managed_fields<K>() -> TransformFunc<K>
where
    K: Resource + Clone + Send + Sync + 'static,
{
    transform_func(|mut obj: Arc<K>| {
        if obj.meta().managed_fields.is_some() {
            // In place when the object is not shared (a decoder hands it over so); a copy when
            // it is, so that no other holder sees it change.
            Arc::make_mut(&mut obj).meta_mut().managed_fields = None;
        }
        Ok(obj)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;

    #[test]
    fn an_object_without_managed_fields_is_passed_through_uncopied() {
        let pod = Arc::new(Pod::default());
        let out = strip_managed_fields::<Pod>()(Arc::clone(&pod)).unwrap();
        assert!(Arc::ptr_eq(&pod, &out));
    }

    #[test]
    fn managed_fields_are_dropped_and_nothing_else_changes() {
        let mut pod = Pod::default();
        pod.metadata.name = Some("a".into());
        pod.metadata.resource_version = Some("7".into());
        let mut expected = pod.clone();
        pod.metadata.managed_fields = Some(vec![ManagedFieldsEntry {
            manager: Some("kubectl".into()),
            ..Default::default()
        }]);
        let out = strip_managed_fields::<Pod>()(Arc::new(pod)).unwrap();
        expected.metadata.managed_fields = None;
        assert_eq!(*out, expected);
    }

    #[test]
    fn a_shared_object_is_copied_and_the_other_holder_keeps_its_managed_fields() {
        let mut pod = Pod::default();
        pod.metadata.name = Some("a".into());
        pod.metadata.managed_fields = Some(vec![ManagedFieldsEntry::default()]);
        let pod = Arc::new(pod);
        let out = strip_managed_fields::<Pod>()(Arc::clone(&pod)).unwrap();
        assert!(!Arc::ptr_eq(&pod, &out));
        assert_eq!(out.metadata.managed_fields, None);
        assert_eq!(out.metadata.name.as_deref(), Some("a"));
        assert_eq!(pod.metadata.managed_fields.as_ref().map(Vec::len), Some(1));
    }
}
