//! Deletes: kube-apiserver's generic store (`rest.BeforeDelete`, `Store.Delete`) with graceful
//! deletion of pods, finalizers and delete preconditions, and the end of a grace period on the
//! server's clock.

use std::sync::Arc;

use serde_json::{Map, Value};

use crate::object_meta::{has_finalizers, meta, meta_mut, meta_str};
use crate::objects::Target;
use crate::resource::ResourceInfo;
use crate::state::Shared;
use crate::status::{DeletePrecondition, StatusError};
use crate::storage::{ChangeType, StoredObject};

impl Shared {
    /// Stops serving resource `r`, as deleting a CRD does: every object is deleted first (one
    /// `DELETED` each, in key order, as the CRD's cleanup finalizer deletes every instance),
    /// then its open watches end cleanly, without an `ERROR` event (kube-apiserver stops the
    /// resource's watch cache, which closes every watcher), and later requests are `404`.
    /// Returns how many objects were deleted.
    pub(crate) fn unregister(&self, r: usize) -> usize {
        let mut storage = self.storage.write();
        let objects: Vec<(String, Arc<StoredObject>)> = storage
            .resource(r)
            .objects
            .iter()
            .map(|(key, object)| (key.clone(), Arc::clone(object)))
            .collect();
        let deleted = objects.len();
        for (key, object) in objects {
            self.remove(&mut storage, r, key, object);
        }
        storage.retire(r);
        deleted
    }

    /// Deletes an object as kube-apiserver's generic store does (`rest.BeforeDelete`,
    /// `Store.Delete`): pods are deleted gracefully, objects with finalizers are only marked.
    pub(crate) fn delete(
        self: &Arc<Self>,
        target: Target<'_>,
        name: &str,
        options: &DeleteOptions,
    ) -> Result<Deleted, StatusError> {
        let mut storage = self.storage.write();
        storage.check_served(target.resource)?;
        let info = storage.resource(target.resource).info.clone();
        let key = info.key(target.namespace, name);
        let Some(old) = storage.get(target.resource, &key).cloned() else {
            return Err(StatusError::not_found(&info, name));
        };
        check_delete_preconditions(&info, name, &old.value, options)?;
        if options.immediate {
            let removed = self.remove(&mut storage, target.resource, key, old);
            return Ok(Deleted::Removed(removed));
        }
        let now = jiff::Timestamp::now();
        let finalizers = has_finalizers(&old.value);
        let mut value = old.value.clone();
        let graceful = match before_delete(&info, &old.value, options, now, &mut value) {
            BeforeDelete::Graceful(period) => period,
            BeforeDelete::NotDelayed if finalizers => {
                mark_as_deleting(&mut value, now);
                if value == old.value {
                    return Ok(Deleted::Terminating(old));
                }
                let marked = self.commit(
                    &mut storage,
                    target.resource,
                    key,
                    ChangeType::Modified,
                    value,
                    Some(old),
                );
                return Ok(Deleted::Terminating(marked));
            }
            BeforeDelete::NotDelayed => {
                let removed = self.remove(&mut storage, target.resource, key, old);
                return Ok(Deleted::Removed(removed));
            }
            BeforeDelete::Pending => return Ok(Deleted::Terminating(old)),
        };
        let change = storage.commit(
            target.resource,
            key.clone(),
            ChangeType::Modified,
            value,
            Some(old),
        );
        let marked = change.object.clone();
        if graceful > 0 || finalizers {
            self.head.send_replace(storage.head);
            drop(storage);
            if graceful > 0 {
                self.schedule_deletion(target.resource, key, &marked, graceful);
            }
            return Ok(Deleted::Terminating(marked));
        }
        // No period and no finalizers: the mark is followed by the removal at once.
        let removed = self.remove(&mut storage, target.resource, key, marked);
        Ok(Deleted::Removed(removed))
    }

    /// Ends the grace period of a terminating object now, as the kubelet does once the pod's
    /// containers have stopped: a delete with `gracePeriodSeconds=0`. With finalizers left, the
    /// object stays until the last one is removed.
    pub(crate) fn finish_deletion(
        self: &Arc<Self>,
        target: Target<'_>,
        name: &str,
    ) -> Result<Deleted, StatusError> {
        let current = self.get(target, name)?;
        if deletion_timestamp(&current.value).is_none() {
            return Err(StatusError::bad_request(format!(
                "{} \"{name}\" is not being deleted",
                self.storage
                    .read()
                    .resource(target.resource)
                    .info
                    .group_resource()
            )));
        }
        self.delete(
            target,
            name,
            &DeleteOptions {
                uid: meta_str(&current.value, "uid").map(str::to_owned),
                grace_period_seconds: Some(0),
                ..DeleteOptions::default()
            },
        )
    }

    /// Finishes the deletion of `marked` after `period` seconds of the server's clock, unless
    /// the object is gone (or replaced) by then.
    fn schedule_deletion(
        self: &Arc<Self>,
        resource: usize,
        key: String,
        marked: &StoredObject,
        period: i64,
    ) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let shared = Arc::downgrade(self);
        let shutdown = self.shutdown.clone();
        let uid = meta_str(&marked.value, "uid").unwrap_or("").to_owned();
        let (namespace, name) = match key.split_once('/') {
            Some((ns, name)) => (Some(ns.to_owned()), name.to_owned()),
            None => (None, key.clone()),
        };
        let wait = std::time::Duration::from_secs(period.unsigned_abs());
        runtime.spawn(async move {
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(wait) => {}
            }
            let Some(shared) = shared.upgrade() else {
                return;
            };
            let target = Target {
                resource,
                namespace: namespace.as_deref(),
            };
            let same = shared
                .get(target, &name)
                .is_ok_and(|o| meta_str(&o.value, "uid") == Some(uid.as_str()));
            if same {
                let _ = shared.finish_deletion(target, &name);
            }
        });
    }
}

/// The `DeleteOptions` of a request: preconditions and the grace period.
#[derive(Clone, Debug, Default)]
pub(crate) struct DeleteOptions {
    pub(crate) resource_version: Option<String>,
    pub(crate) uid: Option<String>,
    pub(crate) grace_period_seconds: Option<i64>,
    /// Removes the object at once, as a delete of its etcd key would: no graceful deletion,
    /// finalizers ignored (the Rust handle's plain `delete`).
    pub(crate) immediate: bool,
}

/// What a delete did.
#[derive(Debug)]
pub(crate) enum Deleted {
    /// The object is gone; its last state, stamped with the delete's revision.
    Removed(Arc<StoredObject>),
    /// The object is still stored, marked with a `deletionTimestamp` (graceful deletion or
    /// pending finalizers).
    Terminating(Arc<StoredObject>),
}

impl Deleted {
    pub(crate) fn object(&self) -> &Arc<StoredObject> {
        match self {
            Deleted::Removed(o) | Deleted::Terminating(o) => o,
        }
    }
}

/// A delete's preconditions (`rest.BeforeDelete`): `uid`, then `resourceVersion`, each a 409
/// when it is not the stored object's.
fn check_delete_preconditions(
    info: &ResourceInfo,
    name: &str,
    old: &Value,
    options: &DeleteOptions,
) -> Result<(), StatusError> {
    let checks = [
        (DeletePrecondition::Uid, options.uid.as_deref(), "uid"),
        (
            DeletePrecondition::ResourceVersion,
            options.resource_version.as_deref(),
            "resourceVersion",
        ),
    ];
    for (precondition, requested, field) in checks {
        let stored = meta_str(old, field).unwrap_or("");
        if let Some(requested) = requested
            && requested != stored
        {
            return Err(StatusError::delete_precondition_failed(
                info,
                name,
                precondition,
                requested,
                stored,
            ));
        }
    }
    Ok(())
}

/// How a delete proceeds, as `rest.BeforeDelete` decides it.
enum BeforeDelete {
    /// Graceful, with this period: the object is marked first.
    Graceful(i64),
    /// The type (or the object's state) does not delay the delete.
    NotDelayed,
    /// A graceful deletion is pending already, and the request does not shorten it: nothing
    /// changes.
    Pending,
}

/// `BeforeDelete` on the stored object `old`: whether the delete is graceful, and if so the
/// deletion marks on `value` (its copy). A pending graceful deletion only moves to a shorter
/// period; a pod's starts with its grace period (see [`pod_grace_period`]).
fn before_delete(
    info: &ResourceInfo,
    old: &Value,
    options: &DeleteOptions,
    now: jiff::Timestamp,
    value: &mut Value,
) -> BeforeDelete {
    if let Some(stamp) = deletion_timestamp(old) {
        let current = meta(old)
            .and_then(|m| m.get("deletionGracePeriodSeconds"))
            .and_then(Value::as_i64)
            .unwrap_or(0);
        if current <= 0 {
            return BeforeDelete::NotDelayed;
        }
        return match options.grace_period_seconds.map(normalize_grace) {
            // Only a shorter grace period may be given; the deadline moves with it.
            Some(period) if period < current => {
                let deadline = stamp - jiff::SignedDuration::from_secs(current)
                    + jiff::SignedDuration::from_secs(period);
                let m = meta_mut(value);
                m.insert("deletionTimestamp".into(), Value::String(rfc3339(deadline)));
                m.insert("deletionGracePeriodSeconds".into(), Value::from(period));
                BeforeDelete::Graceful(period)
            }
            // Graceful deletion already pending: nothing changes.
            _ => BeforeDelete::Pending,
        };
    }
    if info.group.is_empty() && info.plural == "pods" {
        let period = pod_grace_period(old, options.grace_period_seconds);
        let deadline = now + jiff::SignedDuration::from_secs(period);
        let m = meta_mut(value);
        m.insert("deletionTimestamp".into(), Value::String(rfc3339(deadline)));
        m.insert("deletionGracePeriodSeconds".into(), Value::from(period));
        bump_generation(m);
        return BeforeDelete::Graceful(period);
    }
    BeforeDelete::NotDelayed
}

/// `markAsDeleting`: the first delete of an object with finalizers sets the timestamp (now)
/// and bumps the generation; a later one keeps the timestamp.
fn mark_as_deleting(value: &mut Value, now: jiff::Timestamp) {
    let m = meta_mut(value);
    if !m.contains_key("deletionTimestamp") {
        m.insert("deletionTimestamp".into(), Value::String(rfc3339(now)));
        bump_generation(m);
    }
    m.insert("deletionGracePeriodSeconds".into(), Value::from(0));
}

/// `BeforeDelete`: a negative grace period is taken as 1 s.
fn normalize_grace(period: i64) -> i64 {
    if period < 0 { 1 } else { period }
}

fn rfc3339(t: jiff::Timestamp) -> String {
    jiff::Timestamp::from_second(t.as_second())
        .map(|t| t.to_string())
        .unwrap_or_else(|_| t.to_string())
}

fn deletion_timestamp(value: &Value) -> Option<jiff::Timestamp> {
    meta_str(value, "deletionTimestamp").and_then(|s| s.parse().ok())
}

fn bump_generation(meta: &mut Map<String, Value>) {
    if let Some(g) = meta.get("generation").and_then(Value::as_i64)
        && g > 0
    {
        meta.insert("generation".into(), Value::from(g + 1));
    }
}

/// The pod strategy's `CheckGracefulDeletion`: the requested period (negative is 1 s), else
/// the pod's `terminationGracePeriodSeconds`, else 0; 0 for a pod never scheduled to a node
/// or already terminated.
fn pod_grace_period(pod: &Value, requested: Option<i64>) -> i64 {
    let period = requested
        .map(normalize_grace)
        .or_else(|| {
            pod.pointer("/spec/terminationGracePeriodSeconds")
                .and_then(Value::as_i64)
        })
        .unwrap_or(0);
    let scheduled = pod
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .is_some_and(|n| !n.is_empty());
    let terminated = matches!(
        pod.pointer("/status/phase").and_then(Value::as_str),
        Some("Failed" | "Succeeded")
    );
    if scheduled && !terminated {
        period.max(0)
    } else {
        0
    }
}
