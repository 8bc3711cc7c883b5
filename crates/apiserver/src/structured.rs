//! Server-side apply's operations on objects (structured-merge-diff's, on JSON): the fields an
//! applied configuration sets, the fields that differ between two states, the merge of a
//! configuration into the live object, and the removal of fields no longer applied.
//!
//! The simulator has no OpenAPI schemas: every JSON object is taken as a structure of named
//! fields, and a list merges by the merge key strategic merge patch knows for it (built-in
//! types), as a set (`metadata.finalizers`), or else whole (atomic, as every list of a custom
//! resource but the metadata's).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use crate::fieldpath::{FieldSet, PathElement, field, path_string};
use crate::resource::ResourceInfo;

/// How a list merges.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ListKind {
    /// Replaced whole, owned as one field.
    Atomic,
    /// An associative list: elements are identified by this key field.
    Map(&'static str),
    /// A set of scalars: elements are identified by their value.
    Set,
}

/// How the lists of one resource's objects merge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Shape {
    builtin: bool,
}

impl Shape {
    /// The shape of the objects of `info`: built-in types merge their lists by merge key.
    pub(crate) fn of(info: &ResourceInfo) -> Shape {
        Shape {
            builtin: crate::strategy::is_builtin(info),
        }
    }

    /// How list `field` of the object at schema path `parent` merges.
    fn list_kind(self, parent: &str, field: &str) -> ListKind {
        if parent == "/metadata" {
            return match field {
                "finalizers" => ListKind::Set,
                "ownerReferences" => ListKind::Map("uid"),
                _ => ListKind::Atomic,
            };
        }
        if !self.builtin || field == "finalizers" {
            return ListKind::Atomic;
        }
        match crate::patch::merge_strategy(parent, field) {
            Some(Some(key)) => ListKind::Map(key),
            _ => ListKind::Atomic,
        }
    }
}

/// Where a walk is: the schema path (field names from the root, list elements skipped, as
/// strategic merge patch names the parents of its lists) and how the value there merges if
/// it is a list.
#[derive(Clone, Copy)]
struct At<'a> {
    shape: Shape,
    schema: &'a str,
    list: ListKind,
}

impl At<'_> {
    /// Runs `f` at field `name` below this place.
    fn child<R>(&self, name: &str, f: impl FnOnce(At<'_>) -> R) -> R {
        let schema = format!("{}/{name}", self.schema);
        f(At {
            shape: self.shape,
            schema: &schema,
            list: self.shape.list_kind(self.schema, name),
        })
    }

    /// The place of this list's elements.
    fn element(&self) -> At<'_> {
        At {
            list: ListKind::Atomic,
            ..*self
        }
    }
}

fn root(shape: Shape) -> At<'static> {
    At {
        shape,
        schema: "",
        list: ListKind::Atomic,
    }
}

/// The path element of list item `item`, if it has one in a list of `kind`.
fn element_of(kind: ListKind, item: &Value) -> Option<PathElement> {
    match kind {
        ListKind::Atomic => None,
        ListKind::Map(key) => {
            let value = item.as_object()?.get(key)?;
            (!value.is_null()).then(|| PathElement::Key(vec![(key.to_owned(), value.clone())]))
        }
        ListKind::Set => (!item.is_object() && !item.is_array() && !item.is_null())
            .then(|| PathElement::Value(item.clone())),
    }
}

/// The elements of a list of `kind`, each once with its first item; `None` when an item has
/// no element (the list is then handled whole) or, with `unique`, when one repeats.
fn elements(kind: ListKind, items: &[Value], unique: bool) -> Option<Vec<(PathElement, &Value)>> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let element = element_of(kind, item)?;
        if seen.insert(element.clone()) {
            out.push((element, item));
        } else if unique {
            return None;
        }
    }
    Some(out)
}

/// The fields an applied configuration sets (structured-merge-diff's `ToFieldSet`): every
/// leaf, every null or empty object, every element of a merged list, every atomic list. An
/// element without its key, or a repeated one, is the error structured-merge-diff reports.
pub(crate) fn field_set(config: &Value, shape: Shape) -> Result<FieldSet, String> {
    let mut out = FieldSet::default();
    set_walk(config, root(shape), &mut Vec::new(), &mut out)?;
    Ok(out)
}

fn set_walk(
    value: &Value,
    at: At<'_>,
    path: &mut Vec<PathElement>,
    out: &mut FieldSet,
) -> Result<(), String> {
    match value {
        Value::Object(map) => {
            for (name, child) in map {
                path.push(field(name));
                at.child(name, |at| set_walk(child, at, path, out))?;
                if child.is_null() || child.as_object().is_some_and(Map::is_empty) {
                    out.insert(path);
                }
                path.pop();
            }
        }
        Value::Array(items) if at.list != ListKind::Atomic => {
            let mut seen = BTreeSet::new();
            for (i, item) in items.iter().enumerate() {
                let Some(element) = element_of(at.list, item) else {
                    return Err(missing_key(path, at.list, i));
                };
                if !seen.insert(element.clone()) {
                    return Err(format!(
                        "{}: duplicate entries for key {}",
                        path_string(path),
                        path_string(std::slice::from_ref(&element)),
                    ));
                }
                path.push(element);
                set_walk(item, at.element(), path, out)?;
                out.insert(path);
                path.pop();
            }
        }
        _ => out.insert(path),
    }
    Ok(())
}

fn missing_key(path: &[PathElement], kind: ListKind, i: usize) -> String {
    let why = match kind {
        ListKind::Map(key) => format!(
            "associative list with keys has an element that omits key field {key:?} (and doesn't have default value)"
        ),
        _ => "expected a scalar in a set".to_owned(),
    };
    format!("{}: element {i}: {why}", path_string(path))
}

/// What changed from one state of an object to another: the paths added, modified and removed
/// (structured-merge-diff's `Compare`: leaves by value, and the objects and list elements that
/// appear or disappear as paths of their own).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Comparison {
    pub(crate) added: FieldSet,
    pub(crate) modified: FieldSet,
    pub(crate) removed: FieldSet,
}

impl Comparison {
    /// Leaves out `ignored` and everything below it.
    pub(crate) fn without(self, ignored: &FieldSet) -> Comparison {
        Comparison {
            added: self.added.recursive_difference(ignored),
            modified: self.modified.recursive_difference(ignored),
            removed: self.removed.recursive_difference(ignored),
        }
    }

    /// The paths a write set: modified or added.
    pub(crate) fn changed(&self) -> FieldSet {
        self.modified.union(&self.added)
    }
}

/// Compares two states of an object.
pub(crate) fn compare(old: &Value, new: &Value, shape: Shape) -> Comparison {
    let mut out = Comparison::default();
    compare_walk(Some(old), Some(new), root(shape), &mut Vec::new(), &mut out);
    out
}

fn is_object_like(value: Option<&Value>) -> bool {
    value.is_none_or(|v| v.is_null() || v.is_object())
}

fn is_array_like(value: Option<&Value>) -> bool {
    value.is_none_or(|v| v.is_null() || v.is_array())
}

fn compare_walk(
    old: Option<&Value>,
    new: Option<&Value>,
    at: At<'_>,
    path: &mut Vec<PathElement>,
    out: &mut Comparison,
) {
    let objects = (
        old.and_then(Value::as_object),
        new.and_then(Value::as_object),
    );
    let arrays = (old.and_then(Value::as_array), new.and_then(Value::as_array));
    if (objects.0.is_some() || objects.1.is_some()) && is_object_like(old) && is_object_like(new) {
        let empty = objects.0.is_none_or(Map::is_empty) && objects.1.is_none_or(Map::is_empty);
        if empty {
            return compare_leaf(old, new, path, out);
        }
        let names: BTreeSet<&String> = objects
            .0
            .into_iter()
            .chain(objects.1)
            .flat_map(Map::keys)
            .collect();
        for name in names {
            path.push(field(name));
            at.child(name, |at| {
                compare_walk(
                    old.and_then(|o| o.get(name)),
                    new.and_then(|n| n.get(name)),
                    at,
                    path,
                    out,
                );
            });
            path.pop();
        }
        return compare_node(old, new, path, out);
    }
    if (arrays.0.is_some() || arrays.1.is_some()) && is_array_like(old) && is_array_like(new) {
        let (old_items, new_items) = (
            arrays.0.map_or(&[][..], Vec::as_slice),
            arrays.1.map_or(&[][..], Vec::as_slice),
        );
        let keyed = (
            elements(at.list, old_items, false),
            elements(at.list, new_items, false),
        );
        let (Some(old_elements), Some(new_elements)) = keyed else {
            return compare_leaf(old, new, path, out);
        };
        if old_items.is_empty() && new_items.is_empty() {
            return compare_leaf(old, new, path, out);
        }
        let old_by: BTreeMap<&PathElement, &Value> =
            old_elements.iter().map(|(e, v)| (e, *v)).collect();
        let new_by: BTreeMap<&PathElement, &Value> =
            new_elements.iter().map(|(e, v)| (e, *v)).collect();
        let order = old_elements.iter().map(|(e, _)| e).chain(
            new_elements
                .iter()
                .map(|(e, _)| e)
                .filter(|e| !old_by.contains_key(e)),
        );
        for element in order {
            path.push(element.clone());
            compare_walk(
                old_by.get(element).copied(),
                new_by.get(element).copied(),
                at.element(),
                path,
                out,
            );
            path.pop();
        }
        return compare_node(old, new, path, out);
    }
    compare_leaf(old, new, path, out);
}

fn compare_leaf(
    old: Option<&Value>,
    new: Option<&Value>,
    path: &[PathElement],
    out: &mut Comparison,
) {
    if path.is_empty() {
        return;
    }
    match (old, new) {
        (None, Some(_)) => out.added.insert(path),
        (Some(_), None) => out.removed.insert(path),
        (Some(a), Some(b)) if a != b => out.modified.insert(path),
        _ => {}
    }
}

/// An object or list element that appeared or disappeared is a path of its own.
fn compare_node(
    old: Option<&Value>,
    new: Option<&Value>,
    path: &[PathElement],
    out: &mut Comparison,
) {
    if path.is_empty() {
        return;
    }
    match (old, new) {
        (None, Some(_)) => out.added.insert(path),
        (Some(_), None) => out.removed.insert(path),
        _ => {}
    }
}

/// Merges an applied configuration into the live object: objects field by field, merged lists
/// element by element (in structured-merge-diff's order: the live order, with the
/// configuration's new elements where the configuration puts them), everything else replaced.
/// A `null` in the configuration removes the field.
pub(crate) fn merge(live: &Value, config: &Value, shape: Shape) -> Value {
    merge_walk(Some(live), config, root(shape))
}

fn merge_walk(live: Option<&Value>, config: &Value, at: At<'_>) -> Value {
    match config {
        Value::Object(fields) => {
            let mut out = match live {
                Some(Value::Object(map)) => map.clone(),
                _ => Map::new(),
            };
            for (name, value) in fields {
                let existing = out.remove(name);
                if value.is_null() {
                    continue;
                }
                let merged = at.child(name, |at| merge_walk(existing.as_ref(), value, at));
                out.insert(name.clone(), merged);
            }
            Value::Object(out)
        }
        Value::Array(items) => {
            let keyed = match live {
                Some(Value::Array(old)) => elements(at.list, old, true)
                    .zip(elements(at.list, items, true))
                    .map(|(old_elements, new_elements)| {
                        merge_list(&old_elements, &new_elements, at)
                    }),
                _ => None,
            };
            keyed.unwrap_or_else(|| {
                Value::Array(
                    items
                        .iter()
                        .map(|item| merge_walk(None, item, at.element()))
                        .collect(),
                )
            })
        }
        other => other.clone(),
    }
}

/// Two keyed lists merged as structured-merge-diff merges them.
fn merge_list(
    live: &[(PathElement, &Value)],
    config: &[(PathElement, &Value)],
    at: At<'_>,
) -> Value {
    let live_by: BTreeMap<&PathElement, &Value> = live.iter().map(|(e, v)| (e, *v)).collect();
    let config_by: BTreeMap<&PathElement, &Value> = config.iter().map(|(e, v)| (e, *v)).collect();
    let mut shared = config
        .iter()
        .map(|(e, _)| e)
        .filter(|e| live_by.contains_key(e));
    let mut next_shared = shared.next();
    let mut merged: BTreeSet<&PathElement> = BTreeSet::new();
    let mut out = Vec::with_capacity(live.len().max(config.len()));
    let (mut li, mut ci) = (0, 0);
    while li < live.len() || ci < config.len() {
        let before = (li, ci);
        if li < live.len() && ci < config.len() {
            let element = &live[li].0;
            if *element == config[ci].0 {
                merged.insert(element);
                out.push(merge_walk(Some(live[li].1), config[ci].1, at.element()));
                (li, ci) = (li + 1, ci + 1);
                next_shared = shared.next();
                continue;
            }
            if config_by.contains_key(element) && next_shared.is_some_and(|n| n != element) {
                li += 1;
                continue;
            }
        }
        if li < live.len() {
            let element = &live[li].0;
            if !config_by.contains_key(element) {
                out.push(live[li].1.clone());
                li += 1;
                continue;
            }
            if merged.contains(element) {
                li += 1;
                continue;
            }
        }
        if ci < config.len() {
            let element = &config[ci].0;
            merged.insert(element);
            out.push(merge_walk(
                live_by.get(element).copied(),
                config[ci].1,
                at.element(),
            ));
            ci += 1;
            if next_shared == Some(element) {
                next_shared = shared.next();
            }
        }
        if (li, ci) == before {
            break;
        }
    }
    Value::Array(out)
}

/// Removes the members of `remove` from `value`: a field, a list element, or a whole subtree.
pub(crate) fn remove_fields(value: &mut Value, remove: &FieldSet, shape: Shape) {
    remove_walk(value, remove, root(shape));
}

fn remove_walk(value: &mut Value, remove: &FieldSet, at: At<'_>) {
    match value {
        Value::Object(map) => {
            let names: Vec<String> = map.keys().cloned().collect();
            for name in names {
                let element = field(&name);
                if remove.is_member(&element) {
                    map.remove(&name);
                } else if let (Some(below), Some(child)) =
                    (remove.below(&element), map.get_mut(&name))
                {
                    at.child(&name, |at| remove_walk(child, below, at));
                }
            }
        }
        Value::Array(items) => {
            if elements(at.list, items, false).is_none() {
                return;
            }
            for mut item in std::mem::take(items) {
                match element_of(at.list, &item) {
                    Some(element) if remove.is_member(&element) => continue,
                    Some(element) => {
                        if let Some(below) = remove.below(&element) {
                            remove_walk(&mut item, below, at.element());
                        }
                    }
                    None => {}
                }
                items.push(item);
            }
        }
        _ => {}
    }
}

/// What pruning never removes: the object's type, its `metadata` and its system fields.
fn unprunable() -> (FieldSet, FieldSet) {
    let metadata = FieldSet::of(&[&[field("metadata")]]);
    let mut system = FieldSet::of(&[&[field("apiVersion")], &[field("kind")]]);
    for name in [
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "managedFields",
        "selfLink",
    ] {
        system.insert(&[field("metadata"), field(name)]);
    }
    (metadata, system)
}

/// Removes from `merged` what its applier applied last time (`last`) and applies no more,
/// unless a manager owns it (`owned`: every manager's fields, the applier's new ones
/// included). The fields on the way to an owned field count as owned, as structured-merge-diff
/// compares the sets with their named fields made members.
pub(crate) fn prune(merged: &mut Value, last: &FieldSet, owned: &FieldSet, shape: Shape) {
    let (metadata, system) = unprunable();
    let remove = last
        .with_named_fields()
        .difference(&owned.with_named_fields())
        .difference(&metadata)
        .recursive_difference(&system);
    remove_fields(merged, &remove, shape);
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ConfigMap, Pod};
    use serde_json::json;

    fn pods() -> Shape {
        Shape::of(&ResourceInfo::of::<Pod>())
    }

    #[test]
    fn an_applied_configuration_owns_its_leaves_elements_and_atomic_lists() {
        let config = json!({
            "metadata": {"name": "p", "labels": {}, "finalizers": ["a"]},
            "spec": {"containers": [{"name": "c", "args": ["x"], "ports": [{"containerPort": 80}]}],
                     "tolerations": [], "volumes": []}
        });
        let set = field_set(&config, pods()).unwrap();
        assert_eq!(
            set.to_fields_v1(),
            json!({
                "f:metadata": {"f:name": {}, "f:labels": {}, "f:finalizers": {"v:\"a\"": {}}},
                "f:spec": {
                    "f:containers": {"k:{\"name\":\"c\"}": {
                        ".": {}, "f:name": {}, "f:args": {},
                        "f:ports": {"k:{\"containerPort\":80}": {".": {}, "f:containerPort": {}}}}},
                    "f:tolerations": {}
                }
            })
        );
        let twice = json!({"spec": {"containers": [{"name": "c"}, {"name": "c"}]}});
        assert_eq!(
            field_set(&twice, pods()).unwrap_err(),
            ".spec.containers: duplicate entries for key [name=\"c\"]"
        );
    }

    #[test]
    fn comparisons_name_new_objects_and_elements_as_paths_of_their_own() {
        let old = json!({"metadata": {"name": "x"}, "spec": {"containers": [{"name": "a", "image": "1"}]}});
        let new = json!({"metadata": {"name": "x", "labels": {"k": "v"}},
            "spec": {"containers": [{"name": "a", "image": "2"}, {"name": "b"}]}});
        let c = compare(&old, &new, pods());
        assert_eq!(
            c.added.to_fields_v1(),
            json!({"f:metadata": {"f:labels": {".": {}, "f:k": {}}},
                "f:spec": {"f:containers": {"k:{\"name\":\"b\"}": {".": {}, "f:name": {}}}}})
        );
        assert_eq!(
            c.modified.to_fields_v1(),
            json!({"f:spec": {"f:containers": {"k:{\"name\":\"a\"}": {"f:image": {}}}}})
        );
        let back = compare(&new, &old, pods());
        assert_eq!(back.removed, c.added);
    }

    #[test]
    fn merges_keep_the_live_order_and_place_new_elements_as_the_configuration_does() {
        let item = |name: &str| json!({"name": name});
        let live = json!({"spec": {"containers": [item("a"), item("b"), item("c")]}, "keep": 1});
        let config =
            json!({"spec": {"containers": [item("c"), item("x"), item("a")]}, "drop": null});
        let merged = merge(&live, &config, pods());
        let names: Vec<&str> = merged["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["b", "c", "x", "a"]);
        assert_eq!(merged["keep"], 1);
        assert_eq!(merged.get("drop"), None);
        // A configuration map of a config map replaces values key by key; lists of a custom
        // resource are replaced whole.
        let cms = Shape::of(&ResourceInfo::of::<ConfigMap>());
        let merged = merge(
            &json!({"data": {"a": "1"}}),
            &json!({"data": {"b": "2"}}),
            cms,
        );
        assert_eq!(merged, json!({"data": {"a": "1", "b": "2"}}));
        let crs = Shape::of(&ResourceInfo::custom("e.com", "v1", "W", "ws", true));
        let merged = merge(
            &json!({"l": [{"name": "a"}]}),
            &json!({"l": [{"name": "b"}]}),
            crs,
        );
        assert_eq!(merged, json!({"l": [{"name": "b"}]}));
    }

    #[test]
    fn pruning_removes_what_nobody_owns_any_more() {
        let mut object = json!({"metadata": {"name": "x", "labels": {"a": "1", "b": "2"}},
            "spec": {"containers": [{"name": "c", "image": "i"}, {"name": "d"}]}});
        let last = field_set(
            &json!({"metadata": {"labels": {"a": "1"}}, "spec": {"containers": [{"name": "d"}]}}),
            pods(),
        )
        .unwrap();
        let owned = json!({"metadata": {"name": "x", "labels": {"b": "2"}},
            "spec": {"containers": [{"name": "c", "image": "i"}]}});
        let owned = field_set(&owned, pods()).unwrap();
        prune(&mut object, &last, &owned, pods());
        assert_eq!(
            object,
            json!({"metadata": {"name": "x", "labels": {"b": "2"}},
                "spec": {"containers": [{"name": "c", "image": "i"}]}})
        );
    }
}
