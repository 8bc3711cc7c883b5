//! A user-defined partial type: a projection of a pod (metadata, `spec.nodeName`,
//! `status.phase`), with no generated protobuf decoder of its own, for the tests that read one.

use std::borrow::Cow;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::core::NamespaceResourceScope;
use serde::Deserialize;

/// What a node-aware controller reads of a pod, and nothing more.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct SlimPod {
    /// The pod's metadata, whole.
    pub(crate) metadata: ObjectMeta,
    /// What it keeps of the spec.
    #[serde(default)]
    pub(crate) spec: SlimSpec,
    /// What it keeps of the status.
    #[serde(default)]
    pub(crate) status: SlimStatus,
}

/// `spec.nodeName`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SlimSpec {
    /// The node the pod runs on.
    pub(crate) node_name: Option<String>,
}

/// `status.phase`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub(crate) struct SlimStatus {
    /// `Pending`, `Running`, …
    pub(crate) phase: Option<String>,
}

impl Resource for SlimPod {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("Pod")
    }

    fn group(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("")
    }

    fn version(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("v1")
    }

    fn plural(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("pods")
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}
