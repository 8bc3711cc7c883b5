//! The resource types a server serves: their names, URL layout and scope.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::StatusDetails;
use k8s_openapi::{ClusterResourceScope, ListableResource, NamespaceResourceScope, Resource};

/// The scope of a k8s-openapi resource type, as a value. Implemented for
/// [`NamespaceResourceScope`] and [`ClusterResourceScope`], so that [`ResourceInfo::of`] accepts
/// every type that has a collection, and no subresource.
pub trait Scope: k8s_openapi::ResourceScope + sealed::Sealed {
    /// `true` for namespaced resources.
    const NAMESPACED: bool;
}

impl Scope for NamespaceResourceScope {
    const NAMESPACED: bool = true;
}

impl Scope for ClusterResourceScope {
    const NAMESPACED: bool = false;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for k8s_openapi::NamespaceResourceScope {}
    impl Sealed for k8s_openapi::ClusterResourceScope {}
}

/// Everything the server needs to know about one resource type.
///
/// Built from a k8s-openapi type with [`ResourceInfo::of`], or for a custom resource (served
/// schemaless) with [`ResourceInfo::custom`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceInfo {
    /// API group; `""` for the core group.
    pub group: String,
    /// API version, e.g. `v1`.
    pub version: String,
    /// Kind, e.g. `Pod`.
    pub kind: String,
    /// Kind of the collection, e.g. `PodList`.
    pub list_kind: String,
    /// The plural resource name used in URLs, e.g. `pods`.
    pub plural: String,
    /// Namespaced (`true`) or cluster-scoped.
    pub namespaced: bool,
    /// Whether list items carry `kind` and `apiVersion`. Built-in types do not (the long-standing
    /// kube-apiserver quirk); custom resources do.
    pub typed_list_items: bool,
    /// Field selector labels this type supports besides `metadata.name` and
    /// `metadata.namespace`, as dotted JSON paths (e.g. `spec.nodeName` for pods).
    pub selectable_fields: Vec<String>,
    /// Whether objects have a `/status` subresource: writes of the main resource then keep the
    /// stored `status`, and `.../{name}/status` writes change nothing else. Set for the
    /// built-in types kube-apiserver serves with one; for a custom resource, what its CRD's
    /// `subresources.status` says ([`ResourceInfo::with_status_subresource`]).
    pub status_subresource: bool,
}

impl ResourceInfo {
    /// The resource of a k8s-openapi type, e.g. `ResourceInfo::of::<Pod>()`.
    ///
    /// The selectable fields of the built-in types the simulator knows (pods, nodes,
    /// namespaces, events, secrets...) are filled in as kube-apiserver defines them.
    pub fn of<K>() -> Self
    where
        K: Resource + ListableResource,
        K::Scope: Scope,
    {
        let mut info = ResourceInfo {
            group: K::GROUP.to_owned(),
            version: K::VERSION.to_owned(),
            kind: K::KIND.to_owned(),
            list_kind: K::LIST_KIND.to_owned(),
            plural: K::URL_PATH_SEGMENT.to_owned(),
            namespaced: <K::Scope as Scope>::NAMESPACED,
            typed_list_items: false,
            selectable_fields: Vec::new(),
            status_subresource: false,
        };
        info.selectable_fields = builtin_selectable_fields(&info.group, &info.plural)
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        info.status_subresource =
            BUILTIN_STATUS_SUBRESOURCES.contains(&(info.group.as_str(), info.plural.as_str()));
        info
    }

    /// A custom resource, served schemaless: any JSON object with `metadata` is accepted.
    /// Its list kind is `<Kind>List` and its list items carry `kind` and `apiVersion`.
    pub fn custom(group: &str, version: &str, kind: &str, plural: &str, namespaced: bool) -> Self {
        ResourceInfo {
            group: group.to_owned(),
            version: version.to_owned(),
            kind: kind.to_owned(),
            list_kind: format!("{kind}List"),
            plural: plural.to_owned(),
            namespaced,
            typed_list_items: true,
            selectable_fields: Vec::new(),
            status_subresource: false,
        }
    }

    /// The same resource with (or without) a `/status` subresource, as a CRD declares with
    /// `subresources.status`.
    pub fn with_status_subresource(mut self, status: bool) -> Self {
        self.status_subresource = status;
        self
    }

    /// `apiVersion` of the objects: `v1` or `<group>/<version>`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The URL prefix of the group version: `/api/v1` or `/apis/<group>/<version>`.
    pub fn group_version_path(&self) -> String {
        if self.group.is_empty() {
            format!("/api/{}", self.version)
        } else {
            format!("/apis/{}/{}", self.group, self.version)
        }
    }

    /// `plural` or `plural.group`, as apimachinery's `GroupResource.String()` prints it.
    pub fn group_resource(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    pub(crate) fn details(&self, name: &str) -> StatusDetails {
        StatusDetails {
            group: Some(self.group.clone()).filter(|g| !g.is_empty()),
            kind: Some(self.plural.clone()),
            name: Some(name.to_owned()),
            ..StatusDetails::default()
        }
    }

    /// The storage key of an object: `namespace/name`, or `name` when cluster-scoped.
    pub(crate) fn key(&self, namespace: Option<&str>, name: &str) -> String {
        match namespace {
            Some(ns) if self.namespaced => format!("{ns}/{name}"),
            _ => name.to_owned(),
        }
    }
}

/// The built-in resources kube-apiserver serves with a `/status` subresource (group, plural).
const BUILTIN_STATUS_SUBRESOURCES: &[(&str, &str)] = &[
    ("", "pods"),
    ("", "namespaces"),
    ("", "nodes"),
    ("", "services"),
    ("", "persistentvolumeclaims"),
    ("", "persistentvolumes"),
    ("", "replicationcontrollers"),
    ("", "resourcequotas"),
    ("apps", "deployments"),
    ("apps", "replicasets"),
    ("apps", "statefulsets"),
    ("apps", "daemonsets"),
    ("batch", "jobs"),
    ("batch", "cronjobs"),
    ("autoscaling", "horizontalpodautoscalers"),
    ("policy", "poddisruptionbudgets"),
    ("networking.k8s.io", "ingresses"),
    ("networking.k8s.io", "servicecidrs"),
    ("certificates.k8s.io", "certificatesigningrequests"),
    ("storage.k8s.io", "volumeattachments"),
    ("resource.k8s.io", "resourceclaims"),
    ("apiextensions.k8s.io", "customresourcedefinitions"),
    ("apiregistration.k8s.io", "apiservices"),
    ("flowcontrol.apiserver.k8s.io", "flowschemas"),
    (
        "flowcontrol.apiserver.k8s.io",
        "prioritylevelconfigurations",
    ),
    (
        "admissionregistration.k8s.io",
        "validatingadmissionpolicies",
    ),
];

/// Field labels kube-apiserver accepts for built-in types, besides `metadata.name` and
/// `metadata.namespace` (from each type's `GetAttrs`/field label conversion).
fn builtin_selectable_fields(group: &str, plural: &str) -> &'static [&'static str] {
    match (group, plural) {
        ("", "pods") => &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ],
        ("", "nodes") => &["spec.unschedulable"],
        ("", "namespaces") => &["status.phase"],
        ("", "secrets") => &["type"],
        ("", "events") => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        ("", "replicationcontrollers") => &["status.replicas"],
        ("apps", "replicasets") => &["status.replicas"],
        ("batch", "jobs") => &["status.successful"],
        _ => &[],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::{Node, Pod};

    #[test]
    fn typed_resources_take_their_names_from_k8s_openapi() {
        let pod = ResourceInfo::of::<Pod>();
        assert_eq!(
            (
                pod.api_version().as_str(),
                pod.list_kind.as_str(),
                pod.namespaced
            ),
            ("v1", "PodList", true)
        );
        assert_eq!(pod.group_version_path(), "/api/v1");
        assert!(pod.selectable_fields.iter().any(|f| f == "spec.nodeName"));
        let node = ResourceInfo::of::<Node>();
        assert!(!node.namespaced);
        assert_eq!(node.key(Some("ignored"), "n1"), "n1");
        let deploy = ResourceInfo::of::<Deployment>();
        assert_eq!(deploy.group_version_path(), "/apis/apps/v1");
        assert_eq!(deploy.group_resource(), "deployments.apps");
    }
}
