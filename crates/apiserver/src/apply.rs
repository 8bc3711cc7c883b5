//! Server-side apply: `PATCH` with `application/apply-patch+yaml`, as kube-apiserver's
//! `applyPatcher` serves it. The applied configuration (YAML or JSON) is merged into the live
//! object, or creates it; its manager's `Apply` entry in `metadata.managedFields` holds the
//! fields it set. Also the write options every write request carries (`fieldManager`,
//! `force`).

use std::sync::Arc;

use serde_json::{Value, json};

use crate::field_manager;
use crate::managed::{self, ApplyError, Change, ManagedFields, Manager, Operation};
use crate::object_meta::{meta_mut, meta_str, now_rfc3339};
use crate::objects::{Fields, Replace, Target, WRITE_ATTEMPTS, Write, pin_version};
use crate::resource::ResourceInfo;
use crate::state::Shared;
use crate::status::{FieldError, StatusError};
use crate::storage::StoredObject;
use crate::structured::Shape;

/// The options of a write request that say who writes: `fieldManager` and `force`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct WriteOptions {
    pub(crate) field_manager: Option<String>,
    /// `force`, when the query names it (whatever its value).
    pub(crate) force: Option<bool>,
}

impl WriteOptions {
    /// Reads the options from a query string (booleans as kube-apiserver reads them).
    pub(crate) fn parse(query: &str) -> WriteOptions {
        let mut out = WriteOptions::default();
        for (name, value) in form_urlencoded::parse(query.as_bytes()) {
            match name.as_ref() {
                "fieldManager" => out.field_manager = Some(value.into_owned()),
                "force" => out.force = Some(crate::query::parse_bool(&value)),
                _ => {}
            }
        }
        out
    }

    /// The manager of a write that is not an apply (`managerOrUserAgent`): `fieldManager`,
    /// else the first token of the `User-Agent` (what comes before its first `/`, printable
    /// characters only, at most 128 bytes), else empty.
    pub(crate) fn manager(&self, user_agent: Option<&str>) -> String {
        if let Some(manager) = self.field_manager.as_deref().filter(|m| !m.is_empty()) {
            return manager.to_owned();
        }
        let first = user_agent.unwrap_or("").split('/').next().unwrap_or("");
        let mut out = String::new();
        for c in first.chars().filter(|c| !c.is_control()) {
            if out.len() + c.len_utf8() > 128 {
                break;
            }
            out.push(c);
        }
        out
    }

    /// `ValidatePatchOptions`: an apply needs a `fieldManager`; any other patch may not name
    /// `force`. `422 Invalid` otherwise, about `PatchOptions`.
    pub(crate) fn check_patch(&self, apply: bool) -> Result<(), StatusError> {
        let error = if apply {
            self.field_manager
                .as_deref()
                .is_none_or(str::is_empty)
                .then(|| FieldError::required("fieldManager", "is required for apply patch"))
        } else {
            self.force
                .is_some()
                .then(|| FieldError::forbidden("force", "may not be specified for non-apply patch"))
        };
        match error {
            Some(error) => Err(StatusError::invalid_options("PatchOptions", vec![error])),
            None => Ok(()),
        }
    }
}

/// The applied configuration in a request body: one YAML (or JSON) document holding an
/// object. `400` otherwise, with kube-apiserver's `error decoding YAML` message.
pub(crate) fn decode_config(body: &[u8]) -> Result<Value, StatusError> {
    let bad = |why: String| StatusError::bad_request(format!("error decoding YAML: {why}"));
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(json!({}));
    }
    let value: Value = serde_norway::from_slice(body).map_err(|e| bad(e.to_string()))?;
    let kind = match &value {
        Value::Object(_) => return Ok(value),
        Value::Null => return Ok(json!({})),
        Value::Array(_) => "array",
        Value::String(_) => "string",
        Value::Number(_) => "number",
        Value::Bool(_) => "bool",
    };
    Err(bad(format!(
        "error unmarshaling JSON: while decoding JSON: json: cannot unmarshal {kind} into Go value of type map[string]interface {{}}"
    )))
}

/// The checks of the configuration itself, before it meets the live object: it must be of the
/// resource's kind and version (`400 invalid object type: /v1, Kind=Secret`), and carry no
/// `metadata.managedFields`.
fn check_config(info: &ResourceInfo, config: &Value) -> Result<(), StatusError> {
    let text = |name: &str| config.get(name).and_then(Value::as_str).unwrap_or("");
    if text("apiVersion") != info.api_version() || text("kind") != info.kind {
        let (group, version) = text("apiVersion")
            .split_once('/')
            .unwrap_or(("", text("apiVersion")));
        return Err(StatusError::bad_request(format!(
            "invalid object type: {group}/{version}, Kind={}",
            text("kind")
        )));
    }
    if config
        .pointer("/metadata/managedFields")
        .is_some_and(|m| !m.is_null())
    {
        return Err(StatusError::bad_request(
            "metadata.managedFields must be nil",
        ));
    }
    Ok(())
}

/// An apply request: who applies what, and how.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Apply<'a> {
    pub(crate) config: &'a Value,
    pub(crate) manager: &'a str,
    pub(crate) force: bool,
    /// An apply to the `/status` subresource.
    pub(crate) status: bool,
}

impl Apply<'_> {
    fn write(&self) -> Write {
        Write {
            fields: Fields::Applied,
            status: self.status,
        }
    }
}

impl Shared {
    /// A server-side apply of `apply.config` to object `name`: created when missing (`true`
    /// with the object), else merged into it.
    pub(crate) fn apply(
        &self,
        target: Target<'_>,
        name: &str,
        apply: Apply<'_>,
    ) -> Result<(Arc<StoredObject>, bool), StatusError> {
        let info = self.storage.read().resource(target.resource).info.clone();
        check_config(&info, apply.config)?;
        let precondition = meta_str(apply.config, "resourceVersion").is_some();
        let mut attempt = 0;
        loop {
            let result = match self.get(target, name) {
                Ok(old) => self
                    .apply_to(&info, target, name, &old, apply, precondition)
                    .map(|object| (object, false)),
                Err(e) if e.code() == 404 && !apply.status => self
                    .apply_create(&info, target, name, apply)
                    .map(|object| (object, true)),
                Err(e) => Err(e),
            };
            let retry = match &result {
                Err(e) if e.reason() == "AlreadyExists" => true,
                Err(e) => {
                    e.reason() == "Conflict"
                        && !precondition
                        && e.status()
                            .details
                            .as_ref()
                            .is_none_or(|d| d.causes.is_none())
                }
                Ok(_) => false,
            };
            if !retry || attempt >= WRITE_ATTEMPTS {
                return result;
            }
            attempt += 1;
        }
    }

    /// An apply to an object that does not exist: the configuration is the new object, created
    /// as a create would be, with only its manager's `Apply` entry.
    fn apply_create(
        &self,
        info: &ResourceInfo,
        target: Target<'_>,
        name: &str,
        apply: Apply<'_>,
    ) -> Result<Arc<StoredObject>, StatusError> {
        let mut managed = ManagedFields::default();
        let (live, now) = (json!({}), now_rfc3339());
        let mut object = run_apply(info, &mut managed, &live, apply, &now)?;
        match meta_str(&object, "name") {
            None => {
                return Err(StatusError::bad_request(format!(
                    "the name of the object ({name} based on URL) was undeterminable: name must be provided"
                )));
            }
            Some(n) if n != name => {
                return Err(StatusError::bad_request(format!(
                    "the name of the object ({n}) does not match the name on the URL ({name})"
                )));
            }
            Some(_) => {}
        }
        // `WipeObjectMetaSystemFields`: a created object gets its own.
        let meta = meta_mut(&mut object);
        for field in [
            "resourceVersion",
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
        ] {
            meta.remove(field);
        }
        managed.store_in(&mut object);
        self.create_as(target, object, &apply.write())
    }

    /// An apply to the stored object `old`.
    fn apply_to(
        &self,
        info: &ResourceInfo,
        target: Target<'_>,
        name: &str,
        old: &StoredObject,
        apply: Apply<'_>,
        precondition: bool,
    ) -> Result<Arc<StoredObject>, StatusError> {
        let mut managed = ManagedFields::of(&old.value);
        let live = managed::without_managed_fields(&old.value);
        let now = now_rfc3339();
        let mut object = run_apply(info, &mut managed, &live, apply, &now)?;
        if !precondition {
            pin_version(&mut object, &old.value);
        }
        managed.store_in(&mut object);
        self.replace(target, name, object, Replace::Patch, &apply.write())
            .map(|replaced| replaced.object)
    }
}

/// The merge of an apply, its errors as the `Status` kube-apiserver answers: conflicts `409`,
/// a configuration that does not type `500`.
fn run_apply(
    info: &ResourceInfo,
    managed: &mut ManagedFields,
    live: &Value,
    apply: Apply<'_>,
    now: &str,
) -> Result<Value, StatusError> {
    let ignored = crate::strategy::reset_fields(info, apply.status);
    let change = Change {
        live,
        new: live,
        ignored: &ignored,
        shape: Shape::of(info),
        now,
    };
    let manager = Manager::of(info, apply.manager, Operation::Apply, apply.status);
    managed
        .apply(change, apply.config, manager, apply.force)
        .map_err(|e| match e {
            ApplyError::Invalid(why) => StatusError::unclassified(
                500,
                field_manager::invalid_config_message(apply.config, &why),
            ),
            ApplyError::Conflicts(conflicts) => {
                let (message, causes) = field_manager::conflict_report(&conflicts);
                StatusError::apply_conflict(message, causes)
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_and_bodies_are_read_as_kube_apiserver_reads_them() {
        let options = WriteOptions::parse("fieldManager=&force=false");
        assert_eq!(options.check_patch(true).unwrap_err().code(), 422);
        assert_eq!(
            options.check_patch(false).unwrap_err().message(),
            "PatchOptions.meta.k8s.io \"\" is invalid: force: Forbidden: may not be specified for non-apply patch"
        );
        assert_eq!(options.manager(Some("kubectl/v1.32 (linux)")), "kubectl");
        assert_eq!(WriteOptions::default().manager(None), "");
        assert_eq!(
            decode_config(b"kind: ConfigMap\ndata:\n  a: '1'\n").unwrap(),
            json!({"kind": "ConfigMap", "data": {"a": "1"}})
        );
        assert_eq!(decode_config(b"").unwrap(), json!({}));
        assert!(
            decode_config(b"- a").unwrap_err().message().starts_with(
                "error decoding YAML: error unmarshaling JSON: while decoding JSON: json: cannot unmarshal array"
            )
        );
        assert_eq!(decode_config(b"a: [").unwrap_err().code(), 400);
    }
}
