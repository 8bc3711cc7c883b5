//! [`DynamicResource`]: informers of [`DynamicObject`]s for resources known only at run time
//! (client-go's `dynamicinformer`).

use std::fmt;
use std::sync::Arc;

use informer_factory::{DynamicListerWatcherSource, Selection};
use informer_store::SharedIdentity;
use kube::Client;
use kube::api::{Api, DynamicObject};
use kube::discovery::{ApiCapabilities, ApiResource, Scope};

use crate::factory::KubeSource;
use crate::key::KubeIdentity;
use crate::lister_watcher::KubeListerWatcher;

/// A resource known only at run time: its [`ApiResource`] (group, version, kind, plural) and
/// its scope. A [`KubeInformerFactory`](crate::KubeInformerFactory) hands out informers of its
/// objects as [`DynamicObject`]s with
/// [`informer_for(&resource)`](informer_factory::SharedInformerFactory::informer_for), one per
/// resource and selection: two requests for equal resources share an informer.
///
/// A namespaced resource is listed in the selection's namespace or in all of them; a
/// cluster-scoped one always cluster-wide (a namespace is ignored, as for typed cluster-scoped
/// resources). Its objects are keyed `namespace/name` (`name` when cluster-scoped), and every
/// informer starts with the `namespace` index.
///
/// ```
/// use informer_kube::DynamicResource;
/// use kube::api::GroupVersionKind;
/// use kube::discovery::ApiResource;
///
/// let gvk = GroupVersionKind::gvk("example.com", "v1", "Widget");
/// let widgets = DynamicResource::namespaced(ApiResource::from_gvk_with_plural(&gvk, "widgets"));
/// assert!(widgets.is_namespaced());
/// assert_eq!(widgets.to_string(), "widgets.v1.example.com");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DynamicResource {
    api_resource: ApiResource,
    scope: Scope,
}

impl DynamicResource {
    /// The resource `api_resource`, of scope `scope`.
    pub fn new(api_resource: ApiResource, scope: Scope) -> Self {
        Self {
            api_resource,
            scope,
        }
    }

    /// A namespaced resource.
    pub fn namespaced(api_resource: ApiResource) -> Self {
        Self::new(api_resource, Scope::Namespaced)
    }

    /// A cluster-scoped resource.
    pub fn cluster(api_resource: ApiResource) -> Self {
        Self::new(api_resource, Scope::Cluster)
    }

    /// The resource's group, version, kind and plural name.
    pub fn api_resource(&self) -> &ApiResource {
        &self.api_resource
    }

    /// The resource's scope.
    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    /// Whether its objects live in namespaces.
    pub fn is_namespaced(&self) -> bool {
        self.scope == Scope::Namespaced
    }

    /// The api for this resource in `namespace` (`None`, or a cluster-scoped resource: all of
    /// them): [`Api::namespaced_with`] or [`Api::all_with`].
    pub fn api(&self, client: Client, namespace: Option<&str>) -> Api<DynamicObject> {
        match namespace {
            Some(ns) if self.is_namespaced() => {
                Api::namespaced_with(client, ns, &self.api_resource)
            }
            _ => Api::all_with(client, &self.api_resource),
        }
    }
}

/// What discovery finds (`kube::discovery::pinned_kind`, `Discovery::resolve_gvk`).
impl From<(ApiResource, ApiCapabilities)> for DynamicResource {
    fn from((api_resource, capabilities): (ApiResource, ApiCapabilities)) -> Self {
        Self::new(api_resource, capabilities.scope)
    }
}

/// `plural.version.group` (`plural.version` in the core group), as kubectl names a resource.
impl fmt::Display for DynamicResource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ar = &self.api_resource;
        write!(f, "{}.{}", ar.plural, ar.version)?;
        if !ar.group.is_empty() {
            write!(f, ".{}", ar.group)?;
        }
        Ok(())
    }
}

impl DynamicListerWatcherSource<DynamicResource> for KubeSource {
    type Object = DynamicObject;
    type ListerWatcher = KubeListerWatcher<DynamicObject>;

    fn lister_watcher(
        &self,
        resource: &DynamicResource,
        selection: &Selection,
    ) -> KubeListerWatcher<DynamicObject> {
        let api = resource.api(self.client().clone(), selection.namespace.as_deref());
        let mut lw = KubeListerWatcher::new(api);
        if self.without_managed_fields {
            lw = lw.without_managed_fields();
        }
        if let Some(labels) = &selection.label_selector {
            lw = lw.labels(labels.as_str());
        }
        if let Some(fields) = &selection.field_selector {
            lw = lw.fields(fields.as_str());
        }
        lw
    }

    fn identity(&self, _: &DynamicResource) -> SharedIdentity<DynamicObject> {
        Arc::new(KubeIdentity)
    }
}
