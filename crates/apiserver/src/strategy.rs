//! Where the registries of built-in types depart from the generic store: how a `PUT` is
//! treated (`AllowCreateOnUpdate`, `AllowUnconditionalUpdate`), whether `metadata.generation`
//! is kept, and the validation of a type's own fields (`Strategy.Validate`).
//!
//! Only the types whose strategy the simulator reproduces are listed; every other type gets
//! the generic answers (no create on update, unconditional updates allowed, a generation for
//! objects with a `spec`, no validation beyond names).

use serde_json::Value;

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

/// Whether the server keeps `metadata.generation` on `object`: objects with a `spec`, except
/// leases (their strategy never sets one).
pub(crate) fn tracks_generation(info: &ResourceInfo, object: &Value) -> bool {
    object.get("spec").is_some() && !is_lease(info)
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
