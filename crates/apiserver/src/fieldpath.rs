//! Field sets as server-side apply tracks them: the fields of an object one manager owns, their
//! `FieldsV1` form in `metadata.managedFields`, and the paths that conflict messages print.
//!
//! A set is a tree of path elements; a node is a *member* when its path itself is in the set
//! (`.` in `FieldsV1` when the node also has children). Elements order as structured-merge-diff
//! orders them: fields by name, then associative-list keys, then set values, then indices.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use serde_json::{Map, Value};

/// One step of a field path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum PathElement {
    /// A field of an object: `f:<name>`.
    Field(String),
    /// The element of an associative list with these key fields, sorted by name: `k:{..}`.
    Key(Vec<(String, Value)>),
    /// The element of a set list with this value: `v:<json>`.
    Value(Value),
    /// The element of a list at this index: `i:<n>` (read from `FieldsV1`; never computed here).
    Index(usize),
}

impl PathElement {
    fn rank(&self) -> u8 {
        match self {
            PathElement::Field(_) => 0,
            PathElement::Key(_) => 1,
            PathElement::Value(_) => 2,
            PathElement::Index(_) => 3,
        }
    }

    /// The element as a `FieldsV1` key: `f:name`, `k:{"name":"c"}`, `v:"x"`, `i:0`.
    fn fields_v1_key(&self) -> String {
        match self {
            PathElement::Field(name) => format!("f:{name}"),
            PathElement::Key(fields) => {
                let object: Map<String, Value> = fields.iter().cloned().collect();
                format!("k:{}", Value::Object(object))
            }
            PathElement::Value(value) => format!("v:{value}"),
            PathElement::Index(i) => format!("i:{i}"),
        }
    }

    /// Reads a `FieldsV1` key.
    fn from_fields_v1_key(key: &str) -> Result<PathElement, String> {
        let parse =
            |text: &str| serde_json::from_str::<Value>(text).map_err(|e| format!("{key:?}: {e}"));
        if let Some(name) = key.strip_prefix("f:") {
            Ok(PathElement::Field(name.to_owned()))
        } else if let Some(text) = key.strip_prefix("k:") {
            match parse(text)? {
                Value::Object(fields) => Ok(PathElement::Key(fields.into_iter().collect())),
                _ => Err(format!("{key:?}: a key must be a JSON object")),
            }
        } else if let Some(text) = key.strip_prefix("v:") {
            Ok(PathElement::Value(parse(text)?))
        } else if let Some(index) = key.strip_prefix("i:") {
            index
                .parse()
                .map(PathElement::Index)
                .map_err(|e| format!("{key:?}: {e}"))
        } else {
            Err(format!("{key:?}: unknown path element"))
        }
    }

    /// The element as structured-merge-diff prints it in a path: `.name`, `[name="c"]`,
    /// `[="x"]`, `[0]`.
    fn display(&self) -> String {
        match self {
            PathElement::Field(name) => format!(".{name}"),
            PathElement::Key(fields) => {
                let parts: Vec<String> = fields.iter().map(|(k, v)| format!("{k}={v}")).collect();
                format!("[{}]", parts.join(","))
            }
            PathElement::Value(value) => format!("[={value}]"),
            PathElement::Index(i) => format!("[{i}]"),
        }
    }
}

/// Values order by their JSON text: deterministic, and equal exactly when the values are.
fn value_order(a: &Value, b: &Value) -> Ordering {
    a.to_string().cmp(&b.to_string())
}

impl Ord for PathElement {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (PathElement::Field(a), PathElement::Field(b)) => a.cmp(b),
            (PathElement::Key(a), PathElement::Key(b)) => {
                for ((ka, va), (kb, vb)) in a.iter().zip(b) {
                    let order = ka.cmp(kb).then_with(|| value_order(va, vb));
                    if order != Ordering::Equal {
                        return order;
                    }
                }
                a.len().cmp(&b.len())
            }
            (PathElement::Value(a), PathElement::Value(b)) => value_order(a, b),
            (PathElement::Index(a), PathElement::Index(b)) => a.cmp(b),
            _ => self.rank().cmp(&other.rank()),
        }
    }
}

impl PartialOrd for PathElement {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// A path as conflict messages print it: `.spec.containers[name="c"].image`.
pub(crate) fn path_string(path: &[PathElement]) -> String {
    path.iter().map(PathElement::display).collect()
}

/// A set of field paths.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct FieldSet {
    nodes: BTreeMap<PathElement, Node>,
}

/// One element of a set: whether its path is a member, and the paths below it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Node {
    member: bool,
    below: FieldSet,
}

impl Node {
    fn is_empty(&self) -> bool {
        !self.member && self.below.is_empty()
    }
}

impl FieldSet {
    /// A set of the given paths.
    pub(crate) fn of(paths: &[&[PathElement]]) -> FieldSet {
        let mut set = FieldSet::default();
        for path in paths {
            set.insert(path);
        }
        set
    }

    /// Whether the set has no member.
    pub(crate) fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Adds `path` (the empty path is never a member).
    pub(crate) fn insert(&mut self, path: &[PathElement]) {
        let Some((first, rest)) = path.split_first() else {
            return;
        };
        let node = self.nodes.entry(first.clone()).or_default();
        if rest.is_empty() {
            node.member = true;
        } else {
            node.below.insert(rest);
        }
    }

    /// Whether `element`, one step below this set's root, is a member.
    pub(crate) fn is_member(&self, element: &PathElement) -> bool {
        self.nodes.get(element).is_some_and(|n| n.member)
    }

    /// The paths below `element`, one step below this set's root.
    pub(crate) fn below(&self, element: &PathElement) -> Option<&FieldSet> {
        self.nodes
            .get(element)
            .map(|n| &n.below)
            .filter(|b| !b.is_empty())
    }

    /// Every path of either set.
    pub(crate) fn union(&self, other: &FieldSet) -> FieldSet {
        let mut out = self.clone();
        for (element, node) in &other.nodes {
            let mine = out.nodes.entry(element.clone()).or_default();
            mine.member |= node.member;
            mine.below = mine.below.union(&node.below);
        }
        out
    }

    /// The members of this set that are members of `other` too.
    pub(crate) fn intersection(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet::default();
        for (element, node) in &self.nodes {
            let Some(theirs) = other.nodes.get(element) else {
                continue;
            };
            let both = Node {
                member: node.member && theirs.member,
                below: node.below.intersection(&theirs.below),
            };
            if !both.is_empty() {
                out.nodes.insert(element.clone(), both);
            }
        }
        out
    }

    /// The members of this set that are not members of `other` (their children stay).
    pub(crate) fn difference(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet::default();
        for (element, node) in &self.nodes {
            let kept = match other.nodes.get(element) {
                None => node.clone(),
                Some(theirs) => Node {
                    member: node.member && !theirs.member,
                    below: node.below.difference(&theirs.below),
                },
            };
            if !kept.is_empty() {
                out.nodes.insert(element.clone(), kept);
            }
        }
        out
    }

    /// The members of this set that are neither members of `other` nor below one of them.
    pub(crate) fn recursive_difference(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet::default();
        for (element, node) in &self.nodes {
            let kept = match other.nodes.get(element) {
                None => node.clone(),
                Some(theirs) if theirs.member => continue,
                Some(theirs) => Node {
                    member: node.member,
                    below: node.below.recursive_difference(&theirs.below),
                },
            };
            if !kept.is_empty() {
                out.nodes.insert(element.clone(), kept);
            }
        }
        out
    }

    /// This set with every field on the way to a member made a member too (list elements
    /// are not: only named fields), as the pruning of server-side apply compares sets.
    pub(crate) fn with_named_fields(&self) -> FieldSet {
        let mut out = FieldSet::default();
        for (element, node) in &self.nodes {
            let below = node.below.with_named_fields();
            let named = matches!(element, PathElement::Field(_));
            out.nodes.insert(
                element.clone(),
                Node {
                    member: node.member || (named && !below.is_empty()),
                    below,
                },
            );
        }
        out
    }

    /// Every member, in structured-merge-diff's order: at each level the members first, then
    /// the paths below each element.
    pub(crate) fn paths(&self) -> Vec<Vec<PathElement>> {
        let mut out = Vec::new();
        self.collect(&mut Vec::new(), &mut out);
        out
    }

    fn collect(&self, prefix: &mut Vec<PathElement>, out: &mut Vec<Vec<PathElement>>) {
        for (element, node) in &self.nodes {
            if node.member {
                let mut path = prefix.clone();
                path.push(element.clone());
                out.push(path);
            }
        }
        for (element, node) in &self.nodes {
            if !node.below.is_empty() {
                prefix.push(element.clone());
                node.below.collect(prefix, out);
                prefix.pop();
            }
        }
    }

    /// The set in its `FieldsV1` form.
    pub(crate) fn to_fields_v1(&self) -> Value {
        let mut out = Map::new();
        for (element, node) in &self.nodes {
            let mut inner = match node.below.to_fields_v1() {
                Value::Object(map) => map,
                _ => Map::new(),
            };
            if node.member && !inner.is_empty() {
                inner.insert(".".into(), Value::Object(Map::new()));
            }
            out.insert(element.fields_v1_key(), Value::Object(inner));
        }
        Value::Object(out)
    }

    /// Reads a `FieldsV1` value.
    pub(crate) fn from_fields_v1(value: &Value) -> Result<FieldSet, String> {
        let Value::Object(map) = value else {
            return Err("FieldsV1 must be a JSON object".to_owned());
        };
        let mut out = FieldSet::default();
        for (key, inner) in map {
            if key == "." {
                continue;
            }
            let element = PathElement::from_fields_v1_key(key)?;
            let Value::Object(children) = inner else {
                return Err(format!("{key:?}: expected a JSON object"));
            };
            let node = Node {
                member: children.is_empty() || children.contains_key("."),
                below: FieldSet::from_fields_v1(inner)?,
            };
            let mine = out.nodes.entry(element).or_default();
            mine.member |= node.member;
            mine.below = mine.below.union(&node.below);
        }
        Ok(out)
    }
}

/// Shorthands for paths in tests and tables: `field("spec")`.
pub(crate) fn field(name: &str) -> PathElement {
    PathElement::Field(name.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn key(name: &str, value: Value) -> PathElement {
        PathElement::Key(vec![(name.to_owned(), value)])
    }

    #[test]
    fn fields_v1_round_trips_with_members_and_children() {
        let container = [field("spec"), field("containers"), key("name", json!("c"))];
        let mut image = container.to_vec();
        image.push(field("image"));
        let set = FieldSet::of(&[
            &container,
            &image,
            &[field("data"), field("k")],
            &[
                field("metadata"),
                field("finalizers"),
                PathElement::Value(json!("x")),
            ],
        ]);
        let v1 = set.to_fields_v1();
        assert_eq!(
            v1,
            json!({
                "f:data": {"f:k": {}},
                "f:metadata": {"f:finalizers": {"v:\"x\"": {}}},
                "f:spec": {"f:containers": {"k:{\"name\":\"c\"}": {".": {}, "f:image": {}}}}
            })
        );
        assert_eq!(FieldSet::from_fields_v1(&v1).unwrap(), set);
        assert!(FieldSet::from_fields_v1(&json!({"x:y": {}})).is_err());
        assert!(FieldSet::from_fields_v1(&json!({"f:a": 1})).is_err());
        assert_eq!(
            path_string(&image),
            ".spec.containers[name=\"c\"].image".to_owned()
        );
    }

    #[test]
    fn set_operations_follow_members() {
        let a = FieldSet::of(&[
            &[field("a"), field("x")],
            &[field("a"), field("y")],
            &[field("b")],
        ]);
        let b = FieldSet::of(&[&[field("a"), field("x")], &[field("c")]]);
        assert_eq!(
            a.difference(&b),
            FieldSet::of(&[&[field("a"), field("y")], &[field("b")]])
        );
        assert_eq!(
            a.intersection(&b),
            FieldSet::of(&[&[field("a"), field("x")]])
        );
        assert_eq!(a.union(&b).paths().len(), 4);
        let whole_a = FieldSet::of(&[&[field("a")]]);
        assert_eq!(
            a.recursive_difference(&whole_a),
            FieldSet::of(&[&[field("b")]])
        );
        assert_eq!(a.difference(&whole_a), a);
        let named =
            FieldSet::of(&[&[field("s"), key("name", json!("c")), field("i")]]).with_named_fields();
        assert!(named.is_member(&field("s")));
        let below = named.below(&field("s")).unwrap();
        assert!(!below.is_member(&key("name", json!("c"))));
        // Members first, then what is below, each in element order.
        assert_eq!(
            a.union(&b).paths(),
            vec![
                vec![field("b")],
                vec![field("c")],
                vec![field("a"), field("x")],
                vec![field("a"), field("y")],
            ]
        );
    }
}
