//! Writes and reads of single objects, shared by the HTTP handlers and the Rust handle:
//! create, replace (with resourceVersion preconditions), patches, get; server-side apply is
//! in `apply` and deletes in `deletion`, over the commits here.

use std::sync::Arc;

use serde_json::Value;

use crate::object_meta::{
    DNS1123_SUBDOMAIN_ERROR, deletes_during_update, is_dns1123_subdomain, keep_system_metadata,
    meta_mut, meta_str, new_uid, now_rfc3339, random_suffix,
};
use crate::patch::Patch;
use crate::resource::ResourceInfo;
use crate::state::Shared;
use crate::status::{FieldError, StatusError};
use crate::storage::{ChangeType, Storage, StoredObject};
use crate::strategy;

/// How many times a patch or an apply is tried again after losing a race with another writer
/// (kube-apiserver's `GuaranteedUpdate` loop, bounded here).
pub(crate) const WRITE_ATTEMPTS: usize = 16;

/// How a write keeps `metadata.managedFields`, and which part of the object it may change.
#[derive(Clone, Debug, Default)]
pub(crate) struct Write {
    pub(crate) fields: Fields,
    /// A write of the `/status` subresource: only `status` (and what the type's status
    /// strategy lets through) changes.
    pub(crate) status: bool,
}

/// Who owns the fields a write sets.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) enum Fields {
    /// The Rust handle's writes: the object keeps the managed fields it carries (else the
    /// stored ones), and no entry is recorded, as for a write straight into storage.
    #[default]
    Carried,
    /// An HTTP write by this field manager: an `Update` entry records the fields it changed.
    Update(String),
    /// A server-side apply: the object carries the entries the apply computed.
    Applied,
}

impl Write {
    /// An HTTP write of `manager`, to the main resource or to `/status`.
    pub(crate) fn by(manager: String, status: bool) -> Write {
        Write {
            fields: Fields::Update(manager),
            status,
        }
    }
}

/// Where an object lives: its resource and namespace.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Target<'a> {
    pub(crate) resource: usize,
    pub(crate) namespace: Option<&'a str>,
}

/// The answer to a replace: the stored object, and whether the `PUT` created it (types that
/// allow create on update).
#[derive(Debug)]
pub(crate) struct Replaced {
    pub(crate) object: Arc<StoredObject>,
    pub(crate) created: bool,
}

/// Who replaces an object: a client's `PUT`, or the server applying a patch (or an apply) to
/// the stored object (which never creates, and needs no resourceVersion).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Replace {
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

    /// Creates an object from the Rust handle (no managed fields recorded).
    pub(crate) fn create(
        &self,
        target: Target<'_>,
        body: Value,
    ) -> Result<Arc<StoredObject>, StatusError> {
        self.create_as(target, body, &Write::default())
    }

    /// Creates an object: the name (or `generateName`) checked, the type's defaults and the
    /// server's metadata set, and the managed fields as `write` keeps them.
    pub(crate) fn create_as(
        &self,
        target: Target<'_>,
        body: Value,
        write: &Write,
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
        let name = new_object_name(&info, &body)?;
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
        prepare_new_object(&info, name, &mut body, write);
        track_write(&info, write, None, &mut body);
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
        self.update_as(target, name, body, &Write::default())
    }

    /// [`Shared::update`] with the managed fields and the part of the object `write` says.
    pub(crate) fn update_as(
        &self,
        target: Target<'_>,
        name: &str,
        body: Value,
        write: &Write,
    ) -> Result<Replaced, StatusError> {
        self.replace(target, name, body, Replace::Put, write)
    }

    /// Replaces an object: the `PUT` of a client, or the write of a patch's (or an apply's)
    /// result.
    pub(crate) fn replace(
        &self,
        target: Target<'_>,
        name: &str,
        body: Value,
        by: Replace,
        write: &Write,
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
            if by == Replace::Put && policy.create_on_update && !write.status {
                drop(storage);
                return self.create_on_update(target, namespace.as_deref(), name, body, write);
            }
            return Err(StatusError::not_found(&info, name));
        };
        check_update_preconditions(&info, name, &body, &old.value, by, policy.unconditional)?;
        prepare_update(&info, name, &mut body, &old.value, write)?;
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
        let removed = self.commit(
            storage,
            resource,
            key,
            ChangeType::Deleted,
            value,
            Some(old),
        );
        if let Some(queue) = &self.removed
            && let Some(uid) = meta_str(&removed.value, "uid")
        {
            // The collector is gone only when the server is.
            let _ = queue.send(uid.to_owned());
        }
        removed
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
        write: &Write,
    ) -> Result<Replaced, StatusError> {
        let retry = body.clone();
        let meta = meta_mut(&mut body);
        meta.remove("resourceVersion");
        meta.insert("name".into(), Value::String(name.to_owned()));
        let target = Target {
            resource: target.resource,
            namespace: namespace.or(target.namespace),
        };
        match self.create_as(target, body, write) {
            Ok(object) => Ok(Replaced {
                object,
                created: true,
            }),
            Err(e) if e.reason() == "AlreadyExists" => {
                self.replace(target, name, retry, Replace::Put, write)
            }
            Err(e) => Err(e),
        }
    }

    /// Applies a patch from the Rust handle. A `metadata.resourceVersion` the patch sets is a
    /// precondition.
    pub(crate) fn patch(
        &self,
        target: Target<'_>,
        name: &str,
        patch: &Patch,
    ) -> Result<Arc<StoredObject>, StatusError> {
        self.patch_as(target, name, patch, &Write::default())
    }

    /// Applies a patch to the stored object, and writes the result as `write` says. A
    /// `metadata.resourceVersion` the patch sets is a precondition; without one, a write that
    /// lost a race with another is done again from the new state, as the server's
    /// `GuaranteedUpdate` loop does.
    pub(crate) fn patch_as(
        &self,
        target: Target<'_>,
        name: &str,
        patch: &Patch,
        write: &Write,
    ) -> Result<Arc<StoredObject>, StatusError> {
        if let Patch::Merge(p) | Patch::Strategic(p) = patch
            && !p.is_object()
        {
            return Err(StatusError::bad_request(
                "json: cannot unmarshal non-object into Go value of type map[string]interface {}",
            ));
        }
        let precondition = patch.sets_resource_version();
        let mut attempt = 0;
        loop {
            let old = self.get(target, name)?;
            let mut patched = old.value.clone();
            patch.apply(&mut patched)?;
            if !patched.is_object() {
                return Err(StatusError::bad_request(
                    "the patched object is not a JSON object",
                ));
            }
            if !precondition {
                // The patch applies to the object read: a write in between is a conflict,
                // and the patch is applied again.
                pin_version(&mut patched, &old.value);
            }
            match self.replace(target, name, patched, Replace::Patch, write) {
                Ok(replaced) => return Ok(replaced.object),
                Err(e) if e.reason() == "Conflict" && !precondition && attempt < WRITE_ATTEMPTS => {
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// Records the managed fields of a write as `write` says (an apply's are already set).
fn track_write(info: &ResourceInfo, write: &Write, live: Option<&Value>, body: &mut Value) {
    let manager = match &write.fields {
        Fields::Applied => return,
        Fields::Carried => None,
        Fields::Update(manager) => Some(manager.as_str()),
    };
    crate::field_manager::track_write(info, manager, write.status, live, body);
}

/// Sets the `resourceVersion` of `value` to the one of `read`, the object it was made from.
pub(crate) fn pin_version(value: &mut Value, read: &Value) {
    if let Some(rv) = read.pointer("/metadata/resourceVersion").cloned() {
        meta_mut(value).insert("resourceVersion".into(), rv);
    }
}

/// The name of a new object: its `metadata.name`, else its `generateName` and a random suffix;
/// `422` without either, or for a name that is not a DNS-1123 subdomain, or for an object the
/// type's validation refuses.
fn new_object_name(info: &ResourceInfo, body: &Value) -> Result<String, StatusError> {
    let name = match (meta_str(body, "name"), meta_str(body, "generateName")) {
        (Some(n), _) => n.to_owned(),
        (None, Some(prefix)) => format!("{prefix}{}", random_suffix()),
        (None, None) => {
            return Err(StatusError::invalid_object(
                info,
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
            info,
            &name,
            vec![FieldError::invalid(
                "metadata.name",
                &name,
                DNS1123_SUBDOMAIN_ERROR,
            )],
        ));
    }
    let invalid = strategy::validate(info, body);
    if !invalid.is_empty() {
        return Err(StatusError::invalid_object(info, &name, invalid));
    }
    Ok(name)
}

/// The type's create-time preparation (`PrepareForCreate`, defaults; the status rules of the
/// subresource for HTTP writes only) and the metadata the server sets on a new object.
fn prepare_new_object(info: &ResourceInfo, name: String, body: &mut Value, write: &Write) {
    if info.group.is_empty() && info.plural == "pods" {
        crate::defaults::prepare_pod_for_create(body);
    }
    if write.fields != Fields::Carried {
        strategy::prepare_status_on_create(info, body);
    }
    let with_generation = strategy::tracks_generation(info, body);
    let meta = meta_mut(body);
    meta.insert("name".into(), Value::String(name));
    meta.insert("uid".into(), Value::String(new_uid()));
    meta.insert("creationTimestamp".into(), Value::String(now_rfc3339()));
    meta.remove("deletionTimestamp");
    if with_generation {
        meta.insert("generation".into(), Value::from(1));
    } else {
        meta.remove("generation");
    }
}

/// What an update may change of the stored object `old`: the part `write` writes (only the
/// status on `/status`; all but the status on the main resource of a type with the
/// subresource), the server's metadata kept, validation, and the managed fields.
fn prepare_update(
    info: &ResourceInfo,
    name: &str,
    body: &mut Value,
    old: &Value,
    write: &Write,
) -> Result<(), StatusError> {
    if write.status {
        strategy::prepare_status_write(info, body, old);
    } else if write.fields != Fields::Carried {
        // The Rust handle writes into storage: a test sets a pod's status with it, as the
        // kubelet would through `/status`.
        strategy::keep_status(info, body, old);
    }
    keep_system_metadata(info, name, body, old);
    let invalid = strategy::validate(info, body);
    if !invalid.is_empty() {
        return Err(StatusError::invalid_object(info, name, invalid));
    }
    track_write(info, write, Some(old), body);
    Ok(())
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
