//! Where the registries of built-in types depart from the generic store: how a `PUT` is
//! treated (`AllowCreateOnUpdate`, `AllowUnconditionalUpdate`), whether `metadata.generation`
//! is kept, what the `/status` subresource and the main resource may each change, and the
//! validation of a type's own fields (`Strategy.Validate`).
//!
//! Only the types whose strategy the simulator reproduces are listed; every other type gets
//! the generic answers (no create on update, unconditional updates allowed, a generation for
//! objects with a `spec`, no validation beyond names).

use serde_json::Value;

use crate::fieldpath::{FieldSet, field};
use crate::resource::ResourceInfo;
use crate::status::FieldError;

/// A registry strategy's answers for a `PUT`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct UpdatePolicy {
    /// `AllowCreateOnUpdate`: a `PUT` of a missing object creates it (`201 Created`).
    pub(crate) create_on_update: bool,
    /// `AllowUnconditionalUpdate`: a `PUT` without `metadata.resourceVersion` replaces the
    /// stored object; when `false` it is `422 Invalid` ("must be specified for an update").
    pub(crate) unconditional: bool,
}

/// `coordination.k8s.io/v1` leases.
fn is_lease(info: &ResourceInfo) -> bool {
    info.group == "coordination.k8s.io" && info.plural == "leases"
}

/// Whether a resource is one of Kubernetes' own rather than a custom resource: core and
/// unqualified groups, and `*.k8s.io` (strategic merge patches apply to these alone).
pub(crate) fn is_builtin(info: &ResourceInfo) -> bool {
    !info.typed_list_items && (!info.group.contains('.') || info.group.ends_with(".k8s.io"))
}

/// How the type's registry treats a `PUT`.
pub(crate) fn update_policy(info: &ResourceInfo) -> UpdatePolicy {
    if is_lease(info) {
        // `leaseStrategy`: create on update, no unconditional update.
        UpdatePolicy {
            create_on_update: true,
            unconditional: false,
        }
    } else if !is_builtin(info) {
        // `customResourceStrategy`: neither.
        UpdatePolicy {
            create_on_update: false,
            unconditional: false,
        }
    } else {
        UpdatePolicy {
            create_on_update: false,
            unconditional: true,
        }
    }
}

/// Whether the server keeps `metadata.generation` on `object`: every custom resource
/// (`customResourceStrategy.PrepareForCreate` sets 1), and built-in objects with a `spec`,
/// except leases (their strategy never sets one).
pub(crate) fn tracks_generation(info: &ResourceInfo, object: &Value) -> bool {
    if !is_builtin(info) {
        return true;
    }
    object.get("spec").is_some() && !is_lease(info)
}

/// Whether an update from `old` to `new` bumps `metadata.generation`: a change of `spec` for
/// built-in types; for custom resources a change of anything but `metadata` (and `status`,
/// when it is a subresource), as `customResourceStrategy.PrepareForUpdate` decides.
pub(crate) fn generation_changes(info: &ResourceInfo, old: &Value, new: &Value) -> bool {
    if is_builtin(info) {
        return new.get("spec") != old.get("spec");
    }
    let content = |object: &Value| -> serde_json::Map<String, Value> {
        let mut map = object.as_object().cloned().unwrap_or_default();
        map.remove("metadata");
        if info.status_subresource {
            map.remove("status");
        }
        map
    };
    content(old) != content(new)
}

/// A write of the `/status` subresource, as the type's status strategy prepares it
/// (`PrepareForUpdate`): only `status` is taken from the custom resource written; a built-in
/// object keeps the stored `spec` and the metadata its strategy protects (a pod its
/// `ownerReferences`, and its `qosClass` when the write has none; a deployment its `labels`).
pub(crate) fn prepare_status_write(info: &ResourceInfo, body: &mut Value, old: &Value) {
    if !is_builtin(info) {
        let status = body.get("status").cloned();
        let managed = body.pointer("/metadata/managedFields").cloned();
        let version = body.pointer("/metadata/resourceVersion").cloned();
        *body = old.clone();
        let Some(fields) = body.as_object_mut() else {
            return;
        };
        match status {
            Some(status) => fields.insert("status".into(), status),
            None => fields.remove("status"),
        };
        let meta = crate::object_meta::meta_mut(body);
        for (name, value) in [("managedFields", managed), ("resourceVersion", version)] {
            match value {
                Some(value) => meta.insert(name.into(), value),
                None => meta.remove(name),
            };
        }
        return;
    }
    copy_field(body, old, &["spec"]);
    match (info.group.as_str(), info.plural.as_str()) {
        ("", "pods") => {
            copy_field(body, old, &["metadata", "ownerReferences"]);
            if body.pointer("/status/qosClass").is_none()
                && let Some(qos) = old.pointer("/status/qosClass").cloned()
                && let Some(status) = body.get_mut("status").and_then(Value::as_object_mut)
            {
                status.insert("qosClass".into(), qos);
            }
        }
        ("apps", "deployments") => copy_field(body, old, &["metadata", "labels"]),
        _ => {}
    }
}

/// A write of the main resource of a type with a `/status` subresource keeps the stored
/// `status` (every such strategy's `PrepareForUpdate`).
pub(crate) fn keep_status(info: &ResourceInfo, body: &mut Value, old: &Value) {
    if info.status_subresource {
        copy_field(body, old, &["status"]);
    }
}

/// What a create keeps of the client's `status`, for the types with a `/status` subresource
/// (`PrepareForCreate`): custom resources and most built-in types drop it; pods get theirs
/// from [`crate::defaults::prepare_pod_for_create`]; nodes keep it (the kubelet creates its
/// node with a status); namespaces keep it here (kube-apiserver sets `phase: Active`).
pub(crate) fn prepare_status_on_create(info: &ResourceInfo, body: &mut Value) {
    let keeps =
        info.group.is_empty() && matches!(info.plural.as_str(), "pods" | "nodes" | "namespaces");
    if info.status_subresource
        && !keeps
        && let Some(fields) = body.as_object_mut()
    {
        fields.remove("status");
    }
}

/// The fields a write's manager never owns, because the strategy resets them
/// (`GetResetFields`): `status` on the main resource of a type with the subresource; on
/// `/status`, `spec` and what [`prepare_status_write`] keeps of the metadata.
pub(crate) fn reset_fields(info: &ResourceInfo, status_write: bool) -> FieldSet {
    let mut set = FieldSet::default();
    if !status_write {
        if info.status_subresource {
            set.insert(&[field("status")]);
        }
        return set;
    }
    set.insert(&[field("spec")]);
    match (info.group.as_str(), info.plural.as_str()) {
        ("", "pods") => {
            set.insert(&[field("metadata"), field("deletionTimestamp")]);
            set.insert(&[field("metadata"), field("ownerReferences")]);
        }
        ("apps", "deployments") => set.insert(&[field("metadata"), field("labels")]),
        _ => {}
    }
    set
}

/// Sets the field at `path` of `body` to the one of `old` (removed when `old` has none).
fn copy_field(body: &mut Value, old: &Value, path: &[&str]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let source = parents.iter().try_fold(old, |v, name| v.get(name));
    let value = source.and_then(|parent| parent.get(last)).cloned();
    let mut target = body;
    for name in parents {
        if !target.is_object() {
            return;
        }
        let next = target.as_object_mut().map(|map| {
            map.entry(name.to_string())
                .or_insert_with(|| Value::Object(Default::default()))
        });
        match next {
            Some(next) => target = next,
            None => return,
        }
    }
    if let Some(map) = target.as_object_mut() {
        match value {
            Some(value) => map.insert(last.to_string(), value),
            None => map.remove(*last),
        };
    }
}

/// kube-apiserver's decoding of a Secret: every `data` value is base64 (a JSON `[]byte`; a value
/// that is not is a 400 from the decoder), the write-only `stringData` is merged into `data`
/// (its keys win) and dropped, and `type` defaults to `Opaque`.
pub(crate) fn prepare_secret(
    info: &ResourceInfo,
    object: &mut Value,
) -> Result<(), crate::status::StatusError> {
    use base64::Engine as _;
    if !(info.group.is_empty() && info.kind == "Secret") {
        return Ok(());
    }
    let Some(fields) = object.as_object_mut() else {
        return Ok(());
    };
    let engine = base64::engine::general_purpose::STANDARD;
    if let Some(data) = fields.get("data").and_then(Value::as_object) {
        for value in data.values() {
            let valid = match value {
                Value::String(s) => engine.decode(s).map_err(|e| e.to_string()),
                Value::Null => Ok(Vec::new()),
                other => Err(format!(
                    "json: cannot unmarshal {} into Go value of type []uint8",
                    kind_of(other)
                )),
            };
            if let Err(e) = valid {
                return Err(crate::status::StatusError::bad_request(format!(
                    "Secret in version \"v1\" cannot be handled as a Secret: {e}"
                )));
            }
        }
    }
    if let Some(Value::Object(strings)) = fields.remove("stringData") {
        let data = fields
            .entry("data")
            .or_insert_with(|| Value::Object(Default::default()));
        if !data.is_object() {
            *data = Value::Object(Default::default());
        }
        if let Some(data) = data.as_object_mut() {
            for (key, value) in strings {
                let text = value.as_str().unwrap_or_default().to_owned();
                data.insert(key, Value::String(engine.encode(text)));
            }
        }
    }
    if fields
        .get("type")
        .is_none_or(|t| t.as_str().is_none_or(str::is_empty))
    {
        fields.insert("type".into(), Value::String("Opaque".into()));
    }
    Ok(())
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
        _ => "string",
    }
}

/// The type's own validation of a created or updated object (its fields, not its metadata).
pub(crate) fn validate(info: &ResourceInfo, object: &Value) -> Vec<FieldError> {
    if is_lease(info) {
        validate_lease_spec(object)
    } else {
        Vec::new()
    }
}

/// `ValidateLeaseSpec`: a positive `leaseDurationSeconds`, a non-negative `leaseTransitions`.
fn validate_lease_spec(lease: &Value) -> Vec<FieldError> {
    let number = |field: &str| {
        lease
            .get("spec")
            .and_then(|spec| spec.get(field))
            .and_then(Value::as_i64)
    };
    let mut errors = Vec::new();
    if let Some(duration) = number("leaseDurationSeconds")
        && duration <= 0
    {
        errors.push(FieldError::invalid_non_string(
            "spec.leaseDurationSeconds",
            &duration.to_string(),
            "must be greater than 0",
        ));
    }
    if let Some(transitions) = number("leaseTransitions")
        && transitions < 0
    {
        errors.push(FieldError::invalid_non_string(
            "spec.leaseTransitions",
            &transitions.to_string(),
            "must be greater than or equal to 0",
        ));
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::Lease;
    use k8s_openapi::api::core::v1::ConfigMap;
    use serde_json::json;

    #[test]
    fn leases_and_custom_resources_have_their_own_update_policy() {
        let lease = ResourceInfo::of::<Lease>();
        let config_map = ResourceInfo::of::<ConfigMap>();
        assert_eq!(
            update_policy(&lease),
            UpdatePolicy {
                create_on_update: true,
                unconditional: false
            }
        );
        assert_eq!(
            update_policy(&config_map),
            UpdatePolicy {
                create_on_update: false,
                unconditional: true
            }
        );
        let widget = ResourceInfo::custom("example.com", "v1", "Widget", "widgets", true);
        assert_eq!(
            update_policy(&widget),
            UpdatePolicy {
                create_on_update: false,
                unconditional: false
            }
        );
        let object = json!({"spec": {"holderIdentity": "a"}});
        assert!(!tracks_generation(&lease, &object));
        assert!(tracks_generation(&ResourceInfo::of::<ConfigMap>(), &object));
    }

    #[test]
    fn lease_specs_are_validated() {
        let lease = ResourceInfo::of::<Lease>();
        let ok = json!({"spec": {"leaseDurationSeconds": 15, "leaseTransitions": 0}});
        assert!(validate(&lease, &ok).is_empty());
        let bad = json!({"spec": {"leaseDurationSeconds": 0, "leaseTransitions": -1}});
        let errors: Vec<String> = validate(&lease, &bad)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            errors,
            [
                "spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0",
                "spec.leaseTransitions: Invalid value: -1: must be greater than or equal to 0",
            ]
        );
        assert!(validate(&ResourceInfo::of::<ConfigMap>(), &bad).is_empty());
    }
}
