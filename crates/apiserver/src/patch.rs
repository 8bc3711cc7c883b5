//! The patch types of `PATCH`: JSON merge patch (RFC 7386), JSON patch (RFC 6902), and
//! strategic merge patch for the built-in types' common cases.

use serde_json::{Map, Value};

use crate::resource::ResourceInfo;
use crate::status::StatusError;

/// A decoded patch.
#[derive(Debug, Clone)]
pub(crate) enum Patch {
    /// `application/merge-patch+json`.
    Merge(Value),
    /// `application/json-patch+json`.
    Json(json_patch::Patch),
    /// `application/strategic-merge-patch+json`.
    Strategic(Value),
}

const JSON_PATCH: &str = "application/json-patch+json";
const MERGE_PATCH: &str = "application/merge-patch+json";
const STRATEGIC_MERGE_PATCH: &str = "application/strategic-merge-patch+json";
/// The media type of a server-side apply (served by `apply`, not as a [`Patch`]).
pub(crate) const APPLY_PATCH: &str = "application/apply-patch+yaml";

/// The patch types a resource accepts, in kube-apiserver's order: strategic merge patch for
/// built-in types only, server-side apply for every type.
fn accepted(info: &ResourceInfo) -> Vec<&'static str> {
    if crate::strategy::is_builtin(info) {
        vec![JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH, APPLY_PATCH]
    } else {
        vec![JSON_PATCH, MERGE_PATCH, APPLY_PATCH]
    }
}

/// `415 UnsupportedMediaType` for a patch type the resource does not accept, listing those it
/// does (`negotiation.NewUnsupportedMediaTypeError`).
pub(crate) fn check_media_type(info: &ResourceInfo, media: &str) -> Result<(), StatusError> {
    let accepted = accepted(info);
    if accepted.contains(&media) {
        Ok(())
    } else {
        Err(StatusError::unsupported_media_type(&accepted))
    }
}

/// kube-apiserver's limit on the operations of one JSON patch.
const MAX_JSON_PATCH_OPERATIONS: usize = 10000;

impl Patch {
    /// Decodes a patch body of `media` type, or the Status a server answers: `415` for a
    /// type the resource does not accept (listing those it does), `400` for a body that
    /// does not decode, `413` for a JSON patch with too many operations.
    pub(crate) fn decode(
        info: &ResourceInfo,
        media: &str,
        body: &[u8],
    ) -> Result<Patch, StatusError> {
        let builtin = crate::strategy::is_builtin(info);
        let parse = |body: &[u8]| -> Result<Value, StatusError> {
            serde_json::from_slice(body)
                .map_err(|e| StatusError::bad_request(format!("error decoding patch: {e}")))
        };
        match media {
            MERGE_PATCH => Ok(Patch::Merge(object_patch(parse(body)?)?)),
            STRATEGIC_MERGE_PATCH if builtin => Ok(Patch::Strategic(object_patch(parse(body)?)?)),
            JSON_PATCH => {
                let patch: json_patch::Patch = serde_json::from_slice(body)
                    .map_err(|e| StatusError::bad_request(e.to_string()))?;
                if patch.0.len() > MAX_JSON_PATCH_OPERATIONS {
                    return Err(StatusError::custom(
                        413,
                        "RequestEntityTooLarge",
                        format!(
                            "Request entity too large: The allowed maximum operations in a JSON patch is {MAX_JSON_PATCH_OPERATIONS}, got {}",
                            patch.0.len()
                        ),
                    ));
                }
                Ok(Patch::Json(patch))
            }
            _ => Err(StatusError::unsupported_media_type(&accepted(info))),
        }
    }

    /// Whether the patch itself sets `metadata.resourceVersion` (a precondition).
    pub(crate) fn sets_resource_version(&self) -> bool {
        match self {
            Patch::Merge(v) | Patch::Strategic(v) => v
                .pointer("/metadata/resourceVersion")
                .is_some_and(|rv| rv.as_str().is_some_and(|s| !s.is_empty())),
            Patch::Json(p) => {
                p.0.iter()
                    .any(|op| op.path().as_str() == "/metadata/resourceVersion")
            }
        }
    }

    /// Applies the patch to `doc`. A JSON patch operation that fails is `422`, as the
    /// server answers (`the server rejected our request due to an error in our request`).
    pub(crate) fn apply(&self, doc: &mut Value) -> Result<(), StatusError> {
        match self {
            Patch::Merge(p) => {
                json_patch::merge(doc, p);
                Ok(())
            }
            Patch::Strategic(p) => {
                strategic_merge(doc, p, "");
                Ok(())
            }
            Patch::Json(p) => apply_json_patch(doc, &p.0).map_err(|_| {
                StatusError::custom(
                    422,
                    "Invalid",
                    "the server rejected our request due to an error in our request",
                )
                .with_empty_details()
            }),
        }
    }
}

/// Applies a JSON patch as kube-apiserver's library does: all operations or none, and a
/// `test` that the value is `null` passes where the member is missing from an object that
/// exists (RFC 6902 would fail it; clients rely on it to test that a list is not there yet,
/// before adding it, as finalizer helpers do).
fn apply_json_patch(
    doc: &mut Value,
    ops: &[json_patch::PatchOperation],
) -> Result<(), json_patch::PatchError> {
    let mut work = doc.clone();
    for op in ops {
        if let json_patch::PatchOperation::Test(test) = op
            && test.value.is_null()
            && missing_or_null(&work, op.path().as_str())
        {
            continue;
        }
        json_patch::patch(&mut work, std::slice::from_ref(op))?;
    }
    *doc = work;
    Ok(())
}

/// Whether the member `path` names is missing from an object that exists, or is `null`.
fn missing_or_null(doc: &Value, path: &str) -> bool {
    match doc.pointer(path) {
        Some(v) => v.is_null(),
        None => path
            .rfind('/')
            .and_then(|i| doc.pointer(&path[..i]))
            .is_some_and(Value::is_object),
    }
}

fn object_patch(value: Value) -> Result<Value, StatusError> {
    if value.is_object() {
        Ok(value)
    } else {
        Err(StatusError::bad_request(
            "json: cannot unmarshal non-object into Go value of type map[string]interface {}",
        ))
    }
}

/// How a list field merges in a strategic merge patch: by a key field, as a set of
/// primitives, or (`None`) replaced whole. The `patchMergeKey`/`patchStrategy` tags of the
/// built-in types' most used lists; `parent` is the path of the object holding the list.
pub(crate) fn merge_strategy(parent: &str, field: &str) -> Option<Option<&'static str>> {
    let key = match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "volumes"
        | "env"
        | "imagePullSecrets"
        | "resourceClaims" => "name",
        "volumeMounts" => "mountPath",
        "volumeDevices" => "devicePath",
        "hostAliases" => "ip",
        "conditions" => "type",
        "ownerReferences" => "uid",
        "ports" if parent.contains("ontainers") => "containerPort",
        "ports" => "port",
        "finalizers" => return Some(None),
        _ => return None,
    };
    Some(Some(key))
}

/// A strategic merge patch on JSON: maps merge as in a merge patch (`null` deletes), lists
/// with a merge key merge element by element (`$patch: delete` removes one, `$patch:
/// replace` replaces the list), primitive lists with the merge strategy (finalizers) are
/// unions (`$deleteFromPrimitiveList/<field>` removes items), other lists are replaced; a map
/// with `$patch: replace` is replaced, with `$patch: delete` removed. `$setElementOrder` and
/// `$retainKeys` directives are accepted and ignored.
pub(crate) fn strategic_merge(target: &mut Value, patch: &Value, path: &str) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    match p.get("$patch").and_then(Value::as_str) {
        Some("replace") => {
            let mut replaced = p.clone();
            replaced.remove("$patch");
            *target = Value::Object(replaced);
            return;
        }
        Some("delete") => {
            *target = Value::Object(Map::new());
            return;
        }
        _ => {}
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let t = target.as_object_mut().expect("just made an object");
    for (k, v) in p {
        if k == "$patch" || k == "$retainKeys" || k.starts_with("$setElementOrder/") {
            continue;
        }
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(items)), Value::Array(remove)) = (t.get_mut(field), v) {
                items.retain(|i| !remove.contains(i));
            }
            continue;
        }
        if v.is_null() {
            t.remove(k);
            continue;
        }
        let child = format!("{path}/{k}");
        match (merge_strategy(path, k), v) {
            (Some(strategy), Value::Array(items)) => {
                let current = t.entry(k.clone()).or_insert(Value::Array(Vec::new()));
                merge_list(current, items, strategy, &child);
            }
            (None, Value::Array(_)) => {
                t.insert(k.clone(), v.clone());
            }
            _ => strategic_merge(t.entry(k.clone()).or_insert(Value::Null), v, &child),
        }
    }
}

fn merge_list(current: &mut Value, items: &[Value], key: Option<&str>, path: &str) {
    if items
        .iter()
        .any(|i| i.get("$patch").and_then(Value::as_str) == Some("replace"))
    {
        *current = Value::Array(
            items
                .iter()
                .filter(|i| i.get("$patch").is_none())
                .cloned()
                .collect(),
        );
        return;
    }
    if !current.is_array() {
        *current = Value::Array(Vec::new());
    }
    let list = current.as_array_mut().expect("just made an array");
    match key {
        None => {
            for item in items {
                if !list.contains(item) {
                    list.push(item.clone());
                }
            }
        }
        Some(key) => {
            for item in items {
                let Some(id) = item.get(key) else {
                    list.push(item.clone());
                    continue;
                };
                let at = list.iter().position(|e| e.get(key) == Some(id));
                let delete = item.get("$patch").and_then(Value::as_str) == Some("delete");
                match (at, delete) {
                    (Some(i), true) => {
                        list.remove(i);
                    }
                    (None, true) => {}
                    (Some(i), false) => strategic_merge(&mut list[i], item, path),
                    (None, false) => {
                        let mut added = Value::Null;
                        strategic_merge(&mut added, item, path);
                        list.push(added);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn json_patch_of(ops: Value) -> Patch {
        Patch::Json(serde_json::from_value(ops).unwrap())
    }

    #[test]
    fn a_json_patch_test_of_null_passes_on_a_missing_member_and_patches_are_atomic() {
        let doc = json!({"metadata": {"name": "a", "labels": {"x": "1"}, "annotations": null}});
        let add = |path: &str| json!({"op": "add", "path": path, "value": ["f"]});
        let test_null = |path: &str| json!({"op": "test", "path": path, "value": null});
        // Missing from an object that exists, or null: passes.
        for path in ["/metadata/finalizers", "/metadata/annotations"] {
            let mut d = doc.clone();
            json_patch_of(json!([test_null(path), add("/metadata/finalizers")]))
                .apply(&mut d)
                .unwrap_or_else(|e| panic!("{path}: {e}"));
            assert_eq!(d["metadata"]["finalizers"], json!(["f"]));
        }
        // Present and not null, or under a parent that is missing: fails, and nothing applies.
        for path in ["/metadata/labels", "/status/conditions"] {
            let mut d = doc.clone();
            let err = json_patch_of(json!([add("/metadata/finalizers"), test_null(path)]))
                .apply(&mut d)
                .unwrap_err();
            assert_eq!(err.code(), 422, "{path}");
            assert_eq!(d, doc, "{path}: the first operation is undone");
        }
    }

    #[test]
    fn strategic_merge_merges_keyed_lists_and_replaces_others() {
        let mut pod = json!({
            "metadata": {"finalizers": ["a"], "labels": {"x": "1"}},
            "spec": {
                "containers": [
                    {"name": "app", "image": "v1", "env": [{"name": "A", "value": "1"}]},
                    {"name": "sidecar", "image": "s1"}
                ],
                "tolerations": [{"key": "k"}]
            }
        });
        let patch = json!({
            "metadata": {"finalizers": ["b"], "labels": {"x": null, "y": "2"}},
            "spec": {
                "containers": [
                    {"name": "app", "image": "v2", "env": [{"name": "B", "value": "2"}]},
                    {"name": "sidecar", "$patch": "delete"}
                ],
                "tolerations": [{"key": "j"}],
                "$setElementOrder/containers": [{"name": "app"}]
            }
        });
        strategic_merge(&mut pod, &patch, "");
        assert_eq!(
            pod,
            json!({
                "metadata": {"finalizers": ["a", "b"], "labels": {"y": "2"}},
                "spec": {
                    "containers": [{"name": "app", "image": "v2", "env": [
                        {"name": "A", "value": "1"}, {"name": "B", "value": "2"}]}],
                    "tolerations": [{"key": "j"}]
                }
            })
        );
        strategic_merge(
            &mut pod,
            &json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}}),
            "",
        );
        assert_eq!(pod["metadata"]["finalizers"], json!(["b"]));
    }
}
