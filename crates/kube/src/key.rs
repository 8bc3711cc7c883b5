//! Key and index functions for any Kubernetes resource.

use informer_store::{IndexFunc, IndexValues, KeyFunc, index_func, meta_namespace_key};
use k8s_openapi::api::core::v1::Pod;
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

/// An index function for pods by node: a pod is filed under `spec.nodeName`, and an unscheduled
/// pod under no value. The value borrows from the pod; nothing is allocated.
///
/// ```
/// use informer_kube::pod_node_index_func;
/// use k8s_openapi::api::core::v1::{Pod, PodSpec};
///
/// let pod = Pod {
///     spec: Some(PodSpec { node_name: Some("node-1".into()), ..Default::default() }),
///     ..Default::default()
/// };
/// assert_eq!(pod_node_index_func()(&pod).unwrap().as_slice(), ["node-1"]);
/// assert!(pod_node_index_func()(&Pod::default()).unwrap().as_slice().is_empty());
/// ```
pub fn pod_node_index_func() -> IndexFunc<Pod> {
    index_func(|p: &Pod| {
        Ok(p.spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .map(IndexValues::one)
            .unwrap_or_default())
    })
}
