//! Discovery documents: enough of `/api`, `/apis`, `/api/v1`, `/apis/<g>/<v>` and `/version` for
//! kubectl and kube-client to find the registered resources.

use std::collections::BTreeMap;

use axum::body::Body;
use axum::http::header;
use axum::response::Response;
use serde_json::{Value, json};

use crate::config::Config;
use crate::storage::Storage;

const VERBS: [&str; 7] = [
    "create", "delete", "get", "list", "patch", "update", "watch",
];

fn respond(value: &Value) -> Response {
    Response::builder()
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(value.to_string()))
        .unwrap_or_default()
}

/// `/version`.
pub(crate) fn version(config: &Config) -> Response {
    let git = config.git_version.trim_start_matches('v');
    let mut parts = git.split('.');
    let major = parts.next().unwrap_or("1");
    let minor = parts.next().unwrap_or("0");
    respond(&json!({
        "major": major,
        "minor": minor,
        "emulationMajor": major,
        "emulationMinor": minor,
        "gitVersion": config.git_version,
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.25.0",
        "compiler": "gc",
        "platform": format!("{}/{}", std::env::consts::OS, std::env::consts::ARCH),
    }))
}

/// `/api`.
pub(crate) fn core_versions(_storage: &Storage) -> Response {
    respond(&json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": ""}],
    }))
}

/// Group name → versions, for the non-core groups.
fn groups(storage: &Storage) -> BTreeMap<String, Vec<String>> {
    let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for state in storage.resources.iter().filter(|s| s.served) {
        let info = &state.info;
        if info.group.is_empty() {
            continue;
        }
        let versions = groups.entry(info.group.clone()).or_default();
        if !versions.contains(&info.version) {
            versions.push(info.version.clone());
        }
    }
    groups
}

fn group_value(name: &str, versions: &[String]) -> Value {
    let versions: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v}))
        .collect();
    json!({
        "name": name,
        "versions": versions,
        "preferredVersion": versions.first().cloned().unwrap_or(Value::Null),
    })
}

/// `/apis`.
pub(crate) fn group_list(storage: &Storage) -> Response {
    let groups: Vec<Value> = groups(storage)
        .iter()
        .map(|(name, versions)| group_value(name, versions))
        .collect();
    respond(&json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}))
}

/// `/apis/<group>`.
pub(crate) fn group(storage: &Storage, name: &str) -> Option<Response> {
    let groups = groups(storage);
    let versions = groups.get(name)?;
    let mut value = group_value(name, versions);
    value["kind"] = "APIGroup".into();
    value["apiVersion"] = "v1".into();
    Some(respond(&value))
}

/// `/api/v1` or `/apis/<group>/<version>`.
pub(crate) fn resource_list(storage: &Storage, group: &str, version: &str) -> Option<Response> {
    let resources: Vec<Value> = storage
        .resources
        .iter()
        .filter(|s| s.served)
        .map(|s| &s.info)
        .filter(|i| i.group == group && i.version == version)
        .flat_map(|i| {
            let main = json!({
                "name": i.plural,
                "singularName": i.kind.to_lowercase(),
                "namespaced": i.namespaced,
                "kind": i.kind,
                "verbs": VERBS,
            });
            let status = i.status_subresource.then(|| {
                json!({
                    "name": format!("{}/status", i.plural),
                    "singularName": "",
                    "namespaced": i.namespaced,
                    "kind": i.kind,
                    "verbs": ["get", "patch", "update"],
                })
            });
            std::iter::once(main).chain(status)
        })
        .collect();
    if resources.is_empty() && !(group.is_empty() && version == "v1") {
        return None;
    }
    let group_version = if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    };
    Some(respond(&json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    })))
}
