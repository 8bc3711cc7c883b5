//! Writes and reads of single objects, shared by the HTTP handlers and the Rust handle:
//! create, replace (with resourceVersion preconditions), JSON merge patch, get; deletes are in
//! `deletion`, over the commits and metadata helpers here.

use std::sync::Arc;

use rand::Rng;
use serde_json::{Map, Value};

use crate::patch::Patch;
use crate::resource::ResourceInfo;
use crate::state::Shared;
use crate::status::{FieldError, StatusError};
use crate::storage::{ChangeType, Storage, StoredObject};
use crate::strategy;

/// Where an object lives: its resource and namespace.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Target<'a> {
    pub(crate) resource: usize,
    pub(crate) namespace: Option<&'a str>,
}

fn now_rfc3339() -> String {
    let now = jiff::Timestamp::now();
    // Whole seconds, `Z` suffix: how metav1.Time serialises.
    jiff::Timestamp::from_second(now.as_second())
        .map(|t| t.to_string())
        .unwrap_or_else(|_| now.to_string())
}

fn new_uid() -> String {
    let mut bytes: [u8; 16] = rand::rng().random();
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    (0..5)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}

const DNS1123_SUBDOMAIN_ERROR: &str = "a lowercase RFC 1123 subdomain must consist of lower case \
    alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character \
    (e.g. 'example.com', regex used for validation is \
    '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

fn is_dns1123_subdomain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

pub(crate) fn meta(value: &Value) -> Option<&Map<String, Value>> {
    value.get("metadata").and_then(Value::as_object)
}

pub(crate) fn meta_str<'v>(value: &'v Value, field: &str) -> Option<&'v str> {
    meta(value)
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

pub(crate) fn meta_mut(value: &mut Value) -> &mut Map<String, Value> {
    let obj = value.as_object_mut().expect("checked to be an object");
    let meta = obj
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    meta.as_object_mut().expect("just made an object")
}

/// The answer to a replace: the stored object, and whether the `PUT` created it (types that
/// allow create on update).
#[derive(Debug)]
pub(crate) struct Replaced {
    pub(crate) object: Arc<StoredObject>,
    pub(crate) created: bool,
}

/// Who replaces an object: a client's `PUT`, or the server applying a patch to the stored
/// object (which never creates, and needs no resourceVersion).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Replace {
    Put,
    Patch,
}

impl Shared {
    /// Checks `kind`/`apiVersion` if given, strips them (the resource supplies them), and
    /// requires a JSON object.
    fn normalize_body(&self, resource: usize, mut body: Value) -> Result<Value, StatusError> {
        let storage = self.storage.read();
        let info = &storage.resource(resource).info;
        let Some(obj) = body.as_object_mut() else {
            return Err(StatusError::bad_request(format!(
                "the object provided is unrecognized (must be of type {}): couldn't get version/kind; json parse error: expected a JSON object",
                info.kind
            )));
        };
        if let Some(kind) = obj
            .remove("kind")
            .and_then(|k| k.as_str().map(str::to_owned))
            && !kind.is_empty()
            && kind != info.kind
        {
            return Err(StatusError::bad_request(format!(
                "{kind} in version \"{}\" cannot be handled as a {}: the kind of the object does not match the kind of the resource",
                info.version, info.kind
            )));
        }
        if let Some(api_version) = obj
            .remove("apiVersion")
            .and_then(|k| k.as_str().map(str::to_owned))
            && !api_version.is_empty()
            && api_version != info.api_version()
        {
            return Err(StatusError::bad_request(format!(
                "the API version in the data ({api_version}) does not match the expected API version ({})",
                info.api_version()
            )));
        }
        Ok(body)
    }

    fn check_namespace(
        &self,
        target: Target<'_>,
        body: &mut Value,
    ) -> Result<Option<String>, StatusError> {
        let storage = self.storage.read();
        let info = storage.resource(target.resource).info.clone();
        if !info.namespaced {
            meta_mut(body).remove("namespace");
            return Ok(None);
        }
        let in_body = meta_str(body, "namespace").map(str::to_owned);
        let ns = match (target.namespace, in_body) {
            (Some(path), Some(body_ns)) if path != body_ns => {
                return Err(StatusError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            (Some(path), _) => path.to_owned(),
            (None, Some(body_ns)) => body_ns,
            (None, None) => "default".to_owned(),
        };
        meta_mut(body).insert("namespace".into(), Value::String(ns.clone()));
        Ok(Some(ns))
    }

    pub(crate) fn create(
        &self,
        target: Target<'_>,
        body: Value,
    ) -> Result<Arc<StoredObject>, StatusError> {
        let mut body = self.normalize_body(target.resource, body)?;
        if meta_str(&body, "resourceVersion").is_some() {
            // etcd3's store refuses it; the API server reports it as an internal error.
            return Err(StatusError::internal(
                "resourceVersion should not be set on objects to be created",
            ));
        }
        let namespace = self.check_namespace(target, &mut body)?;
        let mut storage = self.storage.write();
        storage.check_served(target.resource)?;
        let info = storage.resource(target.resource).info.clone();
        let name = match (meta_str(&body, "name"), meta_str(&body, "generateName")) {
            (Some(n), _) => n.to_owned(),
            (None, Some(prefix)) => format!("{prefix}{}", random_suffix()),
            (None, None) => {
                return Err(StatusError::invalid_object(
                    &info,
                    "",
                    vec![FieldError::required(
                        "metadata.name",
                        "name or generateName is required",
                    )],
                ));
            }
        };
        if !is_dns1123_subdomain(&name) {
            return Err(StatusError::invalid_object(
                &info,
                &name,
                vec![FieldError::invalid(
                    "metadata.name",
                    &name,
                    DNS1123_SUBDOMAIN_ERROR,
                )],
            ));
        }
        let invalid = strategy::validate(&info, &body);
        if !invalid.is_empty() {
            return Err(StatusError::invalid_object(&info, &name, invalid));
        }
        if self.config.require_namespace
            && let Some(ns) = namespace.as_deref()
            && let Some(ns_resource) = storage.lookup("", "v1", "namespaces")
            && storage.get(ns_resource, ns).is_none()
        {
            let ns_info = storage.resource(ns_resource).info.clone();
            return Err(StatusError::not_found(&ns_info, ns));
        }
        let key = info.key(namespace.as_deref(), &name);
        if storage.get(target.resource, &key).is_some() {
            return Err(StatusError::already_exists(&info, &name));
        }
        if info.group.is_empty() && info.plural == "pods" {
            crate::defaults::prepare_pod_for_create(&mut body);
        }
        let with_generation = strategy::tracks_generation(&info, &body);
        let meta = meta_mut(&mut body);
        meta.insert("name".into(), Value::String(name));
        meta.insert("uid".into(), Value::String(new_uid()));
        meta.insert("creationTimestamp".into(), Value::String(now_rfc3339()));
        meta.remove("deletionTimestamp");
        if with_generation {
            meta.insert("generation".into(), Value::from(1));
        } else {
            meta.remove("generation");
        }
        Ok(self.commit(
            &mut storage,
            target.resource,
            key,
            ChangeType::Added,
            body,
            None,
        ))
    }

    pub(crate) fn get(
        &self,
        target: Target<'_>,
        name: &str,
    ) -> Result<Arc<StoredObject>, StatusError> {
        let storage = self.storage.read();
        let info = &storage.resource(target.resource).info;
        let key = info.key(target.namespace, name);
        storage
            .get(target.resource, &key)
            .cloned()
            .ok_or_else(|| StatusError::not_found(info, name))
    }

    /// A client's replace (`PUT`), as the type's registry treats it: a `metadata.uid` in
    /// `body` is a precondition (409 when another object's); a `metadata.resourceVersion`
    /// other than `""` and `"0"` is one too (409 when stale); without one the update is
    /// unconditional, or 422 for types that refuse unconditional updates; a missing object is
    /// 404, or created for types that allow create on update.
    pub(crate) fn update(
        &self,
        target: Target<'_>,
        name: &str,
        body: Value,
    ) -> Result<Replaced, StatusError> {
        self.replace(target, name, body, Replace::Put)
    }

    /// Replaces an object: the `PUT` of a client, or the write of a patch's result.
    fn replace(
        &self,
        target: Target<'_>,
        name: &str,
        body: Value,
        by: Replace,
    ) -> Result<Replaced, StatusError> {
        let mut body = self.normalize_body(target.resource, body)?;
        let namespace = self.check_namespace(target, &mut body)?;
        match meta_str(&body, "name") {
            Some(n) if n != name => {
                return Err(StatusError::bad_request(format!(
                    "the name of the object ({n}) does not match the name on the URL ({name})"
                )));
            }
            _ => {}
        }
        let mut storage = self.storage.write();
        storage.check_served(target.resource)?;
        let info = storage.resource(target.resource).info.clone();
        let key = info.key(namespace.as_deref(), name);
        let policy = strategy::update_policy(&info);
        let Some(old) = storage.get(target.resource, &key).cloned() else {
            if by == Replace::Put && policy.create_on_update {
                drop(storage);
                return self.create_on_update(target, namespace.as_deref(), name, body);
            }
            return Err(StatusError::not_found(&info, name));
        };
        check_update_preconditions(&info, name, &body, &old.value, by, policy.unconditional)?;
        keep_system_metadata(&info, name, &mut body, &old.value);
        let invalid = strategy::validate(&info, &body);
        if !invalid.is_empty() {
            return Err(StatusError::invalid_object(&info, name, invalid));
        }
        let updated = |object| Replaced {
            object,
            created: false,
        };
        if body == old.value {
            // A no-op update does not take a new revision, as in kube-apiserver.
            return Ok(updated(old));
        }
        if deletes_during_update(&old.value, &body) {
            // `ShouldDeleteDuringUpdate`: the last finalizer of an object marked for deletion
            // is gone, so the update deletes it (the DELETED event carries the stored state).
            return Ok(updated(self.remove(
                &mut storage,
                target.resource,
                key,
                old,
            )));
        }
        let object = self.commit(
            &mut storage,
            target.resource,
            key,
            ChangeType::Modified,
            body,
            Some(old),
        );
        Ok(updated(object))
    }

    /// Commits a change and wakes the waiters on the head revision: the object as stored.
    pub(crate) fn commit(
        &self,
        storage: &mut Storage,
        resource: usize,
        key: String,
        ty: ChangeType,
        value: Value,
        previous: Option<Arc<StoredObject>>,
    ) -> Arc<StoredObject> {
        let change = storage.commit(resource, key, ty, value, previous);
        self.head.send_replace(storage.head);
        change.object.clone()
    }

    /// Removes the object `old` (the `DELETED` event carries its stored state): its last state,
    /// stamped with the delete's revision.
    pub(crate) fn remove(
        &self,
        storage: &mut Storage,
        resource: usize,
        key: String,
        old: Arc<StoredObject>,
    ) -> Arc<StoredObject> {
        let value = old.value.clone();
        self.commit(
            storage,
            resource,
            key,
            ChangeType::Deleted,
            value,
            Some(old),
        )
    }

    /// The create branch of a `PUT` to a missing object (`Store.Update` with
    /// `AllowCreateOnUpdate`): the object is created under the URL's name, its
    /// `resourceVersion` ignored. Losing a race with another create makes it an update.
    fn create_on_update(
        &self,
        target: Target<'_>,
        namespace: Option<&str>,
        name: &str,
        mut body: Value,
    ) -> Result<Replaced, StatusError> {
        let retry = body.clone();
        let meta = meta_mut(&mut body);
        meta.remove("resourceVersion");
        meta.insert("name".into(), Value::String(name.to_owned()));
        let target = Target {
            resource: target.resource,
            namespace: namespace.or(target.namespace),
        };
        match self.create(target, body) {
            Ok(object) => Ok(Replaced {
                object,
                created: true,
            }),
            Err(e) if e.reason() == "AlreadyExists" => {
                self.replace(target, name, retry, Replace::Put)
            }
            Err(e) => Err(e),
        }
    }

    /// Applies a patch. A `metadata.resourceVersion` the patch sets is a precondition.
    pub(crate) fn patch(
        &self,
        target: Target<'_>,
        name: &str,
        patch: &Patch,
    ) -> Result<Arc<StoredObject>, StatusError> {
        if let Patch::Merge(p) | Patch::Strategic(p) = patch
            && !p.is_object()
        {
            return Err(StatusError::bad_request(
                "json: cannot unmarshal non-object into Go value of type map[string]interface {}",
            ));
        }
        let old = self.get(target, name)?;
        let mut patched = old.value.clone();
        patch.apply(&mut patched)?;
        if !patched.is_object() {
            return Err(StatusError::bad_request(
                "the patched object is not a JSON object",
            ));
        }
        let precondition = patch.sets_resource_version();
        if !precondition {
            // No precondition in the patch: the patch applies to the current object.
            meta_mut(&mut patched).remove("resourceVersion");
        }
        match self.replace(target, name, patched, Replace::Patch) {
            Ok(replaced) => Ok(replaced.object),
            // Lost a race with another writer between get and update: retry once more from
            // the new state, as the server's GuaranteedUpdate loop does.
            Err(e) if e.reason() == "Conflict" && !precondition => self.patch(target, name, patch),
            Err(e) => Err(e),
        }
    }
}

/// The preconditions of a replace. A PUT's `metadata.uid` is a precondition
/// (`defaultUpdatedObjectInfo.Preconditions`), checked by the storage before anything else: 409
/// when it names another object. A patch's, once applied, is a change of the immutable field:
/// 422. A `metadata.resourceVersion` other than the stored one is 409; none is 422 for a PUT to
/// a type whose registry refuses unconditional updates.
fn check_update_preconditions(
    info: &ResourceInfo,
    name: &str,
    body: &Value,
    old: &Value,
    by: Replace,
    unconditional: bool,
) -> Result<(), StatusError> {
    let stored_uid = meta_str(old, "uid").unwrap_or("");
    match meta_str(body, "uid") {
        Some(uid) if !uid.is_empty() && uid != stored_uid => {
            return Err(match by {
                Replace::Put => StatusError::uid_precondition_failed(info, name, uid, stored_uid),
                Replace::Patch => StatusError::invalid_object(
                    info,
                    name,
                    vec![FieldError::invalid(
                        "metadata.uid",
                        uid,
                        "field is immutable",
                    )],
                ),
            });
        }
        _ => {}
    }
    // `"0"` parses to revision 0, which the store reads as no version at all.
    match meta_str(body, "resourceVersion").filter(|rv| !rv.is_empty() && *rv != "0") {
        Some(rv) if Some(rv) != meta_str(old, "resourceVersion") => {
            Err(StatusError::stale_update(info, name))
        }
        None if by == Replace::Put && !unconditional => {
            Err(StatusError::resource_version_required(info, name))
        }
        _ => Ok(()),
    }
}

/// The metadata an update cannot set, taken from the stored object `old`: the name of the
/// URL, the system fields and the deletion marks (only a delete sets those), the generation
/// (bumped when the spec changed, for types that track it) and the resourceVersion.
fn keep_system_metadata(info: &ResourceInfo, name: &str, body: &mut Value, old: &Value) {
    let old_meta = meta(old).cloned().unwrap_or_default();
    let spec_changed = body.get("spec") != old.get("spec");
    let with_spec = strategy::tracks_generation(info, body);
    let meta = meta_mut(body);
    meta.insert("name".into(), Value::String(name.to_owned()));
    for field in [
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
    ] {
        match old_meta.get(field) {
            Some(v) => meta.insert(field.into(), v.clone()),
            None => meta.remove(field),
        };
    }
    let old_generation = old_meta.get("generation").and_then(Value::as_i64);
    match (with_spec, old_generation) {
        (true, Some(g)) => {
            meta.insert(
                "generation".into(),
                Value::from(if spec_changed { g + 1 } else { g }),
            );
        }
        (true, None) => {
            meta.insert("generation".into(), Value::from(1));
        }
        (false, _) => {
            meta.remove("generation");
        }
    }
    meta.insert(
        "resourceVersion".into(),
        old_meta
            .get("resourceVersion")
            .cloned()
            .unwrap_or(Value::Null),
    );
}

/// `ShouldDeleteDuringUpdate`: whether an update to `body` of `old`, an object marked for
/// deletion with no grace period left, removed its last finalizer.
fn deletes_during_update(old: &Value, body: &Value) -> bool {
    let old_meta = meta(old);
    old_meta.is_some_and(|m| m.contains_key("deletionTimestamp"))
        && !has_finalizers(body)
        && old_meta
            .and_then(|m| m.get("deletionGracePeriodSeconds"))
            .and_then(Value::as_i64)
            .unwrap_or(0)
            == 0
}

pub(crate) fn has_finalizers(value: &Value) -> bool {
    meta(value)
        .and_then(|m| m.get("finalizers"))
        .and_then(Value::as_array)
        .is_some_and(|f| !f.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uids_are_version_4_uuids_and_names_are_checked() {
        let uid = new_uid();
        assert_eq!(uid.len(), 36);
        assert_eq!(&uid[14..15], "4");
        assert!(is_dns1123_subdomain("web-0.example"));
        assert!(!is_dns1123_subdomain("Web"));
        assert!(!is_dns1123_subdomain("-a"));
        assert!(!is_dns1123_subdomain(""));
        assert!(now_rfc3339().ends_with('Z'));
    }
}
