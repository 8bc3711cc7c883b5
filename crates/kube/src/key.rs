//! The identity, key and index functions of any Kubernetes resource.

use informer_store::{
    Identity, IndexFunc, IndexValues, Indexers, KeyError, KeyFunc, Lister, NAMESPACE_INDEX,
    index_func, indexers, meta_namespace_key,
};
use k8s_openapi::api::core::v1::Pod;
use kube::Resource;

/// The [`Identity`] of every Kubernetes object, typed (`Pod`), metadata only
/// (`PartialObjectMeta<Pod>`), dynamic (`DynamicObject`) or a projection implementing
/// [`Resource`]: the key `namespace/name` (client-go's `MetaNamespaceKeyFunc`),
/// `metadata.resourceVersion`, the `namespace` index, and for sharding `metadata.uid`,
/// `metadata.namespace` and the controller owner's uid.
///
/// ```
/// use informer_kube::KubeIdentity;
/// use informer_store::Identity;
/// use k8s_openapi::api::core::v1::Pod;
/// use kube::api::ObjectMeta;
///
/// let pod = Pod {
///     metadata: ObjectMeta {
///         name: Some("web-0".into()),
///         namespace: Some("prod".into()),
///         resource_version: Some("42".into()),
///         ..Default::default()
///     },
///     ..Default::default()
/// };
/// assert_eq!(KubeIdentity.key(&pod).unwrap(), "prod/web-0");
/// assert_eq!(KubeIdentity.resource_version(&pod), Some("42"));
/// assert!(Identity::<Pod>::indexers(&KubeIdentity).contains_key("namespace"));
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct KubeIdentity;

impl<K: Resource + 'static> Identity<K> for KubeIdentity {
    fn key(&self, obj: &K) -> Result<String, KeyError> {
        let meta = obj.meta();
        meta_namespace_key(
            meta.namespace.as_deref(),
            meta.name.as_deref().unwrap_or_default(),
        )
    }

    fn resource_version<'a>(&self, obj: &'a K) -> Option<&'a str> {
        obj.meta().resource_version.as_deref()
    }

    fn indexers(&self) -> Indexers<K> {
        indexers([(NAMESPACE_INDEX, namespace_index_func::<K>())])
    }

    fn uid<'a>(&self, obj: &'a K) -> Option<&'a str> {
        obj.meta().uid.as_deref()
    }

    fn namespace<'a>(&self, obj: &'a K) -> Option<&'a str> {
        obj.meta().namespace.as_deref()
    }

    fn controller_uid<'a>(&self, obj: &'a K) -> Option<&'a str> {
        let owners = obj.meta().owner_references.as_deref()?;
        owners
            .iter()
            .find(|o| o.controller == Some(true))
            .map(|o| o.uid.as_str())
    }
}

/// client-go's `MetaNamespaceKeyFunc` for any [`Resource`]: `namespace/name`, or `name` for a
/// cluster-scoped object. An object without a name is refused with
/// [`informer_store::KeyError::MissingName`].
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
    informer_store::key_func(|o: &K| KubeIdentity.key(o))
}

/// client-go's `MetaNamespaceIndexFunc` for any [`Resource`]: the object's namespace (`""` for a
/// cluster-scoped object), to register under
/// [`informer_store::NAMESPACE_INDEX`].
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

/// The name of the index [`uid_index_func`] files objects in.
pub const UID_INDEX: &str = "uid";

/// The name of the index [`owner_uid_index_func`] files objects in.
pub const OWNER_UID_INDEX: &str = "owner-uid";

/// An index function by `metadata.uid`: one object per value. With it on an owner's informer, a
/// child's owner references (which name their owner by UID) find the owner's key.
///
/// ```
/// use informer_kube::uid_index_func;
/// use k8s_openapi::api::apps::v1::ReplicaSet;
/// use kube::api::ObjectMeta;
///
/// let rs = ReplicaSet { metadata: ObjectMeta { uid: Some("u-1".into()), ..Default::default() }, ..Default::default() };
/// assert_eq!(uid_index_func::<ReplicaSet>()(&rs).unwrap().as_slice(), ["u-1"]);
/// ```
pub fn uid_index_func<K: Resource + 'static>() -> IndexFunc<K> {
    index_func(|o: &K| Ok(o.meta().uid.as_deref().into()))
}

/// An index function by the UIDs of an object's owner references (every owner, the controller
/// one included): the children of an owner, by its UID. Values borrow from the object.
///
/// ```
/// use informer_kube::owner_uid_index_func;
/// use k8s_openapi::api::core::v1::Pod;
/// use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
/// use kube::api::ObjectMeta;
///
/// let owner = |uid: &str| OwnerReference { uid: uid.into(), ..Default::default() };
/// let pod = Pod {
///     metadata: ObjectMeta { owner_references: Some(vec![owner("rs-1"), owner("x-2")]), ..Default::default() },
///     ..Default::default()
/// };
/// assert_eq!(owner_uid_index_func::<Pod>()(&pod).unwrap().as_slice(), ["rs-1", "x-2"]);
/// ```
pub fn owner_uid_index_func<K: Resource + 'static>() -> IndexFunc<K> {
    index_func(|o: &K| {
        Ok(o.meta()
            .owner_references
            .iter()
            .flatten()
            .map(|r| r.uid.as_str())
            .collect())
    })
}

/// The keys of `child`'s owners that `owners` caches, found through `owners`'s
/// [`UID_INDEX`] (see [`uid_index_func`]): the mapper a reconciler's `owns` takes. An owner
/// reference of another kind, or to an owner not cached, yields nothing.
pub fn owner_keys<C, K>(owners: &Lister<K>, child: &C) -> Vec<String>
where
    C: Resource,
    K: Send + Sync + 'static,
{
    child
        .meta()
        .owner_references
        .iter()
        .flatten()
        .flat_map(|r| owners.index_keys(UID_INDEX, &r.uid).unwrap_or_default())
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use informer_store::{ReflectorStore, ThreadSafeStore, indexers};
    use k8s_openapi::api::apps::v1::ReplicaSet;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use kube::api::ObjectMeta;

    use super::*;

    fn rs(name: &str, uid: &str) -> Arc<ReplicaSet> {
        Arc::new(ReplicaSet {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                uid: Some(uid.into()),
                ..Default::default()
            },
            ..Default::default()
        })
    }

    /// A child's owner references find the cached owners' keys through the UID index; an
    /// owner not cached yields nothing.
    #[test]
    fn owner_keys_follow_owner_references_through_the_uid_index() {
        let store = Arc::new(ThreadSafeStore::with_indexers(
            key_func::<ReplicaSet>(),
            indexers([(UID_INDEX, uid_index_func::<ReplicaSet>())]),
        ));
        store.add(rs("web", "u-web")).unwrap();
        store.add(rs("api", "u-api")).unwrap();
        let owners = Lister::new(store);
        let owner = |uid: &str| OwnerReference {
            uid: uid.into(),
            ..Default::default()
        };
        let pod = Pod {
            metadata: ObjectMeta {
                owner_references: Some(vec![owner("u-api"), owner("u-gone")]),
                ..Default::default()
            },
            ..Default::default()
        };
        assert_eq!(owner_keys(&owners, &pod), ["ns/api"]);
        assert!(owner_keys(&owners, &Pod::default()).is_empty());
    }
}
