//! The field manager of writes: the `Update` entry every write but an apply records, and the
//! answers of an apply that fails (conflicts, a configuration that does not type), worded as
//! kube-apiserver words them.

use serde_json::{Value, json};

use crate::fieldpath::path_string;
use crate::managed::{Change, Conflict, ManagedFields, Manager, Operation, without_managed_fields};
use crate::resource::ResourceInfo;
use crate::structured::Shape;

/// Sets the managed fields of `body`, a write over `live` (`None`: a create), as
/// kube-apiserver's field manager does for every write but an apply: with a `manager`, its
/// `Update` entry records what the write changed (on `/status` when `status`), starting from
/// the entries [`ManagedFields::for_write`] picks; without one (the Rust handle) the object
/// keeps the entries it carries, else the stored ones.
pub(crate) fn track_write(
    info: &ResourceInfo,
    manager: Option<&str>,
    status: bool,
    live: Option<&Value>,
    body: &mut Value,
) {
    let Some(manager) = manager else {
        if body.pointer("/metadata/managedFields").is_none()
            && let Some(stored) = live.and_then(|l| l.pointer("/metadata/managedFields"))
        {
            let stored = stored.clone();
            crate::object_meta::meta_mut(body).insert("managedFields".into(), stored);
        }
        return;
    };
    let mut managed = ManagedFields::for_write(live, body, status);
    let new = without_managed_fields(body);
    let live = live.map_or_else(|| empty_object(info, &new), without_managed_fields);
    let ignored = crate::strategy::reset_fields(info, status);
    let now = crate::object_meta::now_rfc3339();
    let change = Change {
        live: &live,
        new: &new,
        ignored: &ignored,
        shape: Shape::of(info),
        now: &now,
    };
    managed.record_update(
        change,
        Manager::of(info, manager, Operation::Update, status),
    );
    managed.store_in(body);
}

/// The object a create is compared with: what the decoder makes of an empty object of the
/// type. Built-in types have their `spec` and `status` (empty structures, and for pods a null
/// container list); a custom resource has nothing.
pub(crate) fn empty_object(info: &ResourceInfo, new: &Value) -> Value {
    let mut zero = json!({"metadata": {}});
    if crate::strategy::is_builtin(info) {
        for part in ["spec", "status"] {
            if new.get(part).is_some_and(Value::is_object) {
                zero[part] = json!({});
            }
        }
        if info.group.is_empty() && info.plural == "pods" && zero.get("spec").is_some() {
            zero["spec"]["containers"] = Value::Null;
        }
    }
    zero
}

/// The message of a configuration structured-merge-diff cannot type (kube-apiserver answers
/// it as a `500` without a reason): `failed to create typed patch object (ns/name; /v1,
/// Kind=ConfigMap): ...`.
pub(crate) fn invalid_config_message(config: &Value, why: &str) -> String {
    let text = |pointer: &str| {
        config
            .pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or("")
    };
    let (group, version) = match text("/apiVersion").split_once('/') {
        Some((group, version)) => (group.to_owned(), version.to_owned()),
        None => (String::new(), text("/apiVersion").to_owned()),
    };
    format!(
        "failed to create typed patch object ({}/{}; {group}/{version}, Kind={}): {why}",
        text("/metadata/namespace"),
        text("/metadata/name"),
        text("/kind"),
    )
}

/// The causes and message of an apply's conflicts (`NewConflictError`).
pub(crate) fn conflict_report(conflicts: &[Conflict]) -> (String, Vec<(String, String)>) {
    let causes: Vec<(String, String)> = conflicts
        .iter()
        .map(|c| {
            (
                format!("conflict with {}", c.manager.printed()),
                path_string(&c.path),
            )
        })
        .collect();
    if let [one] = conflicts {
        let message = format!(
            "Apply failed with 1 conflict: conflict with {}: {}",
            one.manager.printed(),
            path_string(&one.path)
        );
        return (message, causes);
    }
    let mut lines = Vec::new();
    let mut previous: Option<&Manager> = None;
    for conflict in conflicts {
        if previous != Some(&conflict.manager) {
            lines.push(format!("conflicts with {}:", conflict.manager.printed()));
            previous = Some(&conflict.manager);
        }
        lines.push(format!("- {}", path_string(&conflict.path)));
    }
    let message = format!(
        "Apply failed with {} conflicts: {}",
        conflicts.len(),
        lines.join("\n")
    );
    (message, causes)
}
