//! Key and index functions for any Kubernetes resource.

use informer_store::{IndexFunc, IndexValues, KeyFunc, index_func, meta_namespace_key};
use kube::Resource;

/// client-go's `MetaNamespaceKeyFunc` for any [`Resource`]: `namespace/name`, or `name` for a
/// cluster-scoped object. An object without a name is refused with
/// [`KeyError::MissingName`](informer_store::KeyError::MissingName).
///
/// ```
/// use informer_kube::key_func;
/// use k8s_openapi::api::core::v1::{Namespace, Pod};
/// use kube::api::ObjectMeta;
///
/// let pod = Pod {
///     metadata: ObjectMeta { name: Some("web-0".into()), namespace: Some("prod".into()), ..Default::default() },
///     ..Default::default()
/// };
/// assert_eq!(key_func::<Pod>()(&pod).unwrap(), "prod/web-0");
/// let ns = Namespace {
///     metadata: ObjectMeta { name: Some("prod".into()), ..Default::default() },
///     ..Default::default()
/// };
/// assert_eq!(key_func::<Namespace>()(&ns).unwrap(), "prod");
/// assert!(key_func::<Pod>()(&Pod::default()).is_err());
/// ```
pub fn key_func<K: Resource + 'static>() -> KeyFunc<K> {
    informer_store::key_func(|o: &K| {
        let meta = o.meta();
        meta_namespace_key(
            meta.namespace.as_deref(),
            meta.name.as_deref().unwrap_or_default(),
        )
    })
}

/// client-go's `MetaNamespaceIndexFunc` for any [`Resource`]: the object's namespace (`""` for a
/// cluster-scoped object), to register under
/// [`NAMESPACE_INDEX`](informer_store::NAMESPACE_INDEX).
///
/// ```
/// use informer_kube::namespace_index_func;
/// use k8s_openapi::api::core::v1::Pod;
/// use kube::api::ObjectMeta;
///
/// let pod = Pod {
///     metadata: ObjectMeta { name: Some("web-0".into()), namespace: Some("prod".into()), ..Default::default() },
///     ..Default::default()
/// };
/// assert_eq!(namespace_index_func::<Pod>()(&pod).unwrap().as_slice(), ["prod"]);
/// ```
pub fn namespace_index_func<K: Resource + 'static>() -> IndexFunc<K> {
    index_func(|o: &K| {
        Ok(IndexValues::one(
            o.meta().namespace.as_deref().unwrap_or_default(),
        ))
    })
}
