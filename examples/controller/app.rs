//! The `App` custom resource: its type, the children it wants and its CustomResourceDefinition.

use std::borrow::Cow;
use std::collections::BTreeMap;

use informers::k8s_openapi::api::core::v1::ConfigMap;
use informers::k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use informers::k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use informers::kube_client;
use serde::{Deserialize, Serialize};

pub(crate) const GROUP: &str = "example.informers.dev";

/// The controller's name: its field manager (the owner of the fields it applies), its Lease.
pub(crate) const CONTROLLER: &str = "app-controller";

/// The label that names a child's `App`, for the cleanup's consistent list.
pub(crate) const APP_LABEL: &str = "example.informers.dev/app";

/// The custom resource: `spec` is the user's, `status` the controller's (written through the
/// `/status` subresource, so that neither write touches the other's half).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct App {
    pub(crate) metadata: ObjectMeta,
    pub(crate) spec: AppSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) status: Option<AppStatus>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct AppSpec {
    pub(crate) replicas: u32,
}

/// What the controller last saw: the children in place, and the spec they are for.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct AppStatus {
    /// The App's children, each as the spec wants it, as the controller's cache showed them.
    pub(crate) children: u32,
    /// The `metadata.generation` whose spec they are for.
    pub(crate) observed_generation: i64,
}

impl kube_client::Resource for App {
    type DynamicType = ();
    type Scope = kube_client::core::NamespaceResourceScope;
    fn kind(_: &()) -> Cow<'_, str> {
        "App".into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        GROUP.into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        "v1".into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "apps".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// The name of `app`'s child at `index`: `<app>-<index>`.
pub(crate) fn child_name(app: &App, index: u32) -> String {
    let name = app.metadata.name.as_deref().unwrap_or_default();
    format!("{name}-{index}")
}

/// The ConfigMap `app` wants at `index`: as applied, only the fields the controller owns.
pub(crate) fn desired(app: &App, index: u32) -> ConfigMap {
    let name = app.metadata.name.clone().unwrap_or_default();
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(child_name(app, index)),
            namespace: app.metadata.namespace.clone(),
            labels: Some(BTreeMap::from([(APP_LABEL.into(), name.clone())])),
            owner_references: Some(vec![OwnerReference {
                api_version: format!("{GROUP}/v1"),
                kind: "App".into(),
                name,
                uid: app.metadata.uid.clone().unwrap_or_default(),
                controller: Some(true),
                ..Default::default()
            }]),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("index".into(), index.to_string())])),
        ..Default::default()
    }
}

/// Whether `have` carries what `want` applies: its label and its data. Only those: other
/// field managers may add labels or data of their own, which an apply leaves to them.
pub(crate) fn as_wanted(have: &ConfigMap, want: &ConfigMap) -> bool {
    holds(have.metadata.labels.as_ref(), want.metadata.labels.as_ref())
        && holds(have.data.as_ref(), want.data.as_ref())
}

/// Whether every entry of `want` is in `have`.
fn holds(have: Option<&BTreeMap<String, String>>, want: Option<&BTreeMap<String, String>>) -> bool {
    want.into_iter()
        .flatten()
        .all(|(k, v)| have.and_then(|h| h.get(k)) == Some(v))
}

/// The `App` CustomResourceDefinition, for a cluster that does not serve Apps yet: with the
/// status subresource, and the status in its schema (a structural schema prunes what it does
/// not name).
pub(crate) fn app_crd() -> Result<CustomResourceDefinition, serde_json::Error> {
    let integer = serde_json::json!({"type": "integer", "minimum": 0});
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("apps.{GROUP}")},
        "spec": {
            "group": GROUP,
            "names": {"kind": "App", "plural": "apps", "singular": "app", "listKind": "AppList"},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {"replicas": integer}},
                    "status": {"type": "object", "properties": {
                        "children": integer,
                        "observedGeneration": {"type": "integer", "format": "int64"},
                    }},
                }}},
            }],
        },
    }))
}
