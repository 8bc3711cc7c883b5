//! `metadata.managedFields`: which manager owns which fields of an object, as kube-apiserver's
//! field manager keeps it (`k8s.io/apimachinery/pkg/util/managedfields`). Every write records
//! the fields it changed in an `Update` entry of its manager; a server-side apply merges the
//! applied configuration, removes what its manager no longer applies, and refuses to change
//! another manager's field unless forced.

use serde_json::{Map, Value, json};

use crate::fieldpath::{FieldSet, PathElement, field};
use crate::resource::ResourceInfo;
use crate::structured::{self, Shape};

/// How many `Update` entries an object keeps (`DefaultMaxUpdateManagers`); past it the oldest
/// are merged into one `ancient-changes` entry per API version.
const MAX_UPDATE_MANAGERS: usize = 10;
/// The manager name of the merged oldest `Update` entries.
const ANCIENT_CHANGES: &str = "ancient-changes";

/// The operation of an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Operation {
    /// A server-side apply.
    Apply,
    /// Any other write.
    Update,
}

impl Operation {
    fn as_str(self) -> &'static str {
        match self {
            Operation::Apply => "Apply",
            Operation::Update => "Update",
        }
    }
}

/// Who wrote: an entry's identity. An applier is one entry whatever the API version it applied
/// with; an updater is one per API version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Manager {
    pub(crate) name: String,
    pub(crate) operation: Operation,
    pub(crate) api_version: String,
    /// `status` for a write of that subresource, else empty.
    pub(crate) subresource: String,
}

impl Manager {
    /// The manager `name` writing objects of `info`, on `/status` when `status`.
    pub(crate) fn of(
        info: &ResourceInfo,
        name: &str,
        operation: Operation,
        status: bool,
    ) -> Manager {
        Manager {
            name: name.to_owned(),
            operation,
            api_version: info.api_version(),
            subresource: if status {
                "status".to_owned()
            } else {
                String::new()
            },
        }
    }

    fn same(&self, other: &Manager) -> bool {
        self.name == other.name
            && self.operation == other.operation
            && self.subresource == other.subresource
            && (self.operation == Operation::Apply || self.api_version == other.api_version)
    }

    /// The identity as kube-apiserver writes it (`BuildManagerIdentifier`): conflicts are
    /// grouped by manager in this text's order.
    fn identifier(&self) -> String {
        let mut map = vec![format!("\"manager\":{}", Value::from(self.name.as_str()))];
        map.push(format!("\"operation\":\"{}\"", self.operation.as_str()));
        if self.operation == Operation::Update && !self.api_version.is_empty() {
            map.push(format!(
                "\"apiVersion\":{}",
                Value::from(self.api_version.as_str())
            ));
        }
        if !self.subresource.is_empty() {
            map.push(format!(
                "\"subresource\":{}",
                Value::from(self.subresource.as_str())
            ));
        }
        format!("{{{}}}", map.join(","))
    }

    /// The manager as conflict messages name it: `"kubectl"`, `"kubelet" with subresource
    /// "status" using v1`.
    pub(crate) fn printed(&self) -> String {
        let mut out = Value::from(self.name.as_str()).to_string();
        if !self.subresource.is_empty() {
            out = format!(
                "{out} with subresource {}",
                Value::from(self.subresource.as_str())
            );
        }
        match self.operation {
            Operation::Update => format!("{out} using {}", self.api_version),
            Operation::Apply => out,
        }
    }
}

/// One entry of `metadata.managedFields`.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    manager: Manager,
    /// When the manager last changed the object (RFC 3339).
    time: Option<String>,
    fields: FieldSet,
}

/// The entries of one object.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ManagedFields {
    entries: Vec<Entry>,
}

/// One field an apply would take from another manager.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Conflict {
    pub(crate) manager: Manager,
    pub(crate) path: Vec<PathElement>,
}

/// Why an apply failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ApplyError {
    /// The configuration is not a valid object of its type (a list element without its key, a
    /// repeated one): structured-merge-diff's message.
    Invalid(String),
    /// Fields other managers own would change.
    Conflicts(Vec<Conflict>),
}

/// The fields no entry ever holds (`stripMetaManager`).
fn stripped() -> FieldSet {
    let mut set = FieldSet::of(&[
        &[field("apiVersion")],
        &[field("kind")],
        &[field("metadata")],
    ]);
    for name in [
        "name",
        "namespace",
        "creationTimestamp",
        "selfLink",
        "uid",
        "clusterName",
        "generation",
        "managedFields",
        "resourceVersion",
    ] {
        set.insert(&[field("metadata"), field(name)]);
    }
    set
}

/// Seconds since the epoch of an entry's time; 0 without one (kube-apiserver's sort key).
fn seconds(time: Option<&str>) -> i64 {
    time.and_then(|t| t.parse::<jiff::Timestamp>().ok())
        .map_or(0, |t| t.as_second())
}

/// Whether `value` asks to reset the managed fields: `[]`, or one empty entry (`[{}]`).
fn is_reset(value: &Value) -> bool {
    match value.as_array().map(Vec::as_slice) {
        Some([]) => true,
        Some([only]) => only.as_object().is_some_and(Map::is_empty),
        _ => false,
    }
}

/// `value` without `metadata.managedFields`.
pub(crate) fn without_managed_fields(value: &Value) -> Value {
    let mut out = value.clone();
    if let Some(meta) = out.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
    }
    out
}

impl ManagedFields {
    /// Reads `managedFields` as kube-apiserver does (`DecodeManagedFields`): every entry needs
    /// an operation (`Apply` or `Update`), an `apiVersion`, `fieldsType: FieldsV1` and fields
    /// that read; two entries of one manager leave the later one.
    fn decode(value: &Value) -> Result<ManagedFields, String> {
        let items = value.as_array().ok_or("managedFields must be a list")?;
        let mut out = ManagedFields::default();
        for (i, item) in items.iter().enumerate() {
            let entry = item
                .as_object()
                .ok_or("a managedFields entry must be an object")?;
            let text = |name: &str| entry.get(name).and_then(Value::as_str).unwrap_or("");
            let operation = match text("operation") {
                "Apply" => Operation::Apply,
                "Update" => Operation::Update,
                _ => return Err("operation must be `Apply` or `Update`".to_owned()),
            };
            if text("apiVersion").is_empty() {
                return Err("apiVersion must not be empty".to_owned());
            }
            match text("fieldsType") {
                "FieldsV1" => {}
                "" => return Err(format!("missing fieldsType in managed fields entry {i}")),
                other => {
                    return Err(format!(
                        "invalid fieldsType {other:?} in managed fields entry {i}"
                    ));
                }
            }
            let fields = match entry.get("fieldsV1") {
                None | Some(Value::Null) => FieldSet::default(),
                Some(v1) => FieldSet::from_fields_v1(v1)?,
            };
            out.put(Entry {
                manager: Manager {
                    name: text("manager").to_owned(),
                    operation,
                    api_version: text("apiVersion").to_owned(),
                    subresource: text("subresource").to_owned(),
                },
                time: entry.get("time").and_then(Value::as_str).map(str::to_owned),
                fields,
            });
        }
        Ok(out)
    }

    fn put(&mut self, entry: Entry) {
        match self
            .entries
            .iter_mut()
            .find(|e| e.manager.same(&entry.manager))
        {
            Some(existing) => *existing = entry,
            None => self.entries.push(entry),
        }
    }

    /// The entries of a stored object (none when they do not read).
    pub(crate) fn of(object: &Value) -> ManagedFields {
        object
            .pointer("/metadata/managedFields")
            .and_then(|v| Self::decode(v).ok())
            .unwrap_or_default()
    }

    /// The entries a write over `live` (`None` for a create) starts from (`decodeLiveOrNew`): a
    /// subresource write always the stored object's; else `[]` or `[{}]` in `body` reset them,
    /// entries in `body` that read replace them, and anything else keeps the stored ones.
    pub(crate) fn for_write(
        live: Option<&Value>,
        body: &Value,
        subresource: bool,
    ) -> ManagedFields {
        let stored = || live.map(Self::of).unwrap_or_default();
        if subresource {
            return stored();
        }
        match body.pointer("/metadata/managedFields") {
            Some(given) if is_reset(given) => ManagedFields::default(),
            Some(given) => match Self::decode(given) {
                Ok(managed) if !managed.entries.is_empty() => managed,
                _ => stored(),
            },
            None => stored(),
        }
    }

    /// The entries as `metadata.managedFields`, sorted as kube-apiserver sorts them (operation,
    /// then time, manager, apiVersion, subresource); `None` when there is none.
    pub(crate) fn encode(&self) -> Option<Value> {
        if self.entries.is_empty() {
            return None;
        }
        let mut entries: Vec<&Entry> = self.entries.iter().collect();
        entries.sort_by(|a, b| {
            let key = |e: &Entry| {
                (
                    e.manager.operation.as_str(),
                    seconds(e.time.as_deref()),
                    e.manager.name.clone(),
                    e.manager.api_version.clone(),
                    e.manager.subresource.clone(),
                )
            };
            key(a).cmp(&key(b))
        });
        let encoded = entries.into_iter().map(|e| {
            let mut out = Map::new();
            if !e.manager.name.is_empty() {
                out.insert("manager".into(), json!(e.manager.name));
            }
            out.insert("operation".into(), json!(e.manager.operation.as_str()));
            out.insert("apiVersion".into(), json!(e.manager.api_version));
            if let Some(time) = &e.time {
                out.insert("time".into(), json!(time));
            }
            out.insert("fieldsType".into(), json!("FieldsV1"));
            out.insert("fieldsV1".into(), e.fields.to_fields_v1());
            if !e.manager.subresource.is_empty() {
                out.insert("subresource".into(), json!(e.manager.subresource));
            }
            Value::Object(out)
        });
        Some(Value::Array(encoded.collect()))
    }

    /// Writes the entries into `object`'s metadata (without the field when there is none).
    pub(crate) fn store_in(&self, object: &mut Value) {
        let encoded = self.encode();
        let meta = crate::object_meta::meta_mut(object);
        match encoded {
            Some(list) => meta.insert("managedFields".into(), list),
            None => meta.remove("managedFields"),
        };
    }

    /// Records an `Update` by `manager` that turned `live` into `new` (both without managed
    /// fields): the fields it changed leave every other entry and join its own, which takes the
    /// time `now` when it changed any; the fields it removed leave every entry.
    pub(crate) fn record_update(&mut self, change: Change<'_>, manager: Manager) {
        let comparison =
            structured::compare(change.live, change.new, change.shape).without(change.ignored);
        let changed = comparison.changed();
        for entry in &mut self.entries {
            entry.fields = entry
                .fields
                .difference(&changed)
                .difference(&comparison.removed);
        }
        let current = changed.difference(&stripped());
        if !current.is_empty() {
            match self.entries.iter_mut().find(|e| e.manager.same(&manager)) {
                Some(entry) => {
                    entry.fields = entry.fields.union(&current);
                    entry.time = Some(change.now.to_owned());
                }
                None => self.entries.push(Entry {
                    manager,
                    time: Some(change.now.to_owned()),
                    fields: current,
                }),
            }
        }
        self.entries.retain(|e| !e.fields.is_empty());
        self.cap_updaters();
    }

    /// A server-side apply by `manager` of `config` onto `change.live` (without managed fields;
    /// `change.new` is unused): the configuration merged in, the fields the manager applied
    /// before and applies no more removed unless another manager owns them, and the fields it
    /// sets taken from the other managers when `force`, else refused where their value
    /// changes. Returns the merged object; its entry takes the time `now` when the object
    /// changed.
    pub(crate) fn apply(
        &mut self,
        change: Change<'_>,
        config: &Value,
        manager: Manager,
        force: bool,
    ) -> Result<Value, ApplyError> {
        let shape = change.shape;
        let applied = structured::field_set(config, shape)
            .map_err(ApplyError::Invalid)?
            .recursive_difference(change.ignored);
        let mut merged = structured::merge(change.live, config, shape);
        let last = self
            .entries
            .iter()
            .position(|e| e.manager.same(&manager))
            .map(|i| self.entries.remove(i));
        if let Some(last) = &last {
            let owned = self
                .entries
                .iter()
                .fold(applied.clone(), |owned, e| owned.union(&e.fields));
            structured::prune(&mut merged, &last.fields, &owned, shape);
        }
        let comparison = structured::compare(change.live, &merged, shape).without(change.ignored);
        let changed = comparison.changed();
        let conflicts = self.conflicts(&changed);
        if !force && !conflicts.is_empty() {
            return Err(ApplyError::Conflicts(conflicts));
        }
        for entry in &mut self.entries {
            entry.fields = entry
                .fields
                .difference(&changed)
                .difference(&comparison.removed);
        }
        let time = if merged != *change.live {
            Some(change.now.to_owned())
        } else {
            last.and_then(|e| e.time)
        };
        let fields = applied.difference(&stripped());
        if !fields.is_empty() {
            self.entries.push(Entry {
                manager,
                time,
                fields,
            });
        }
        self.entries.retain(|e| !e.fields.is_empty());
        self.cap_updaters();
        Ok(merged)
    }

    /// The fields of `changed` other entries own, by manager (in the order of their
    /// identities), then path.
    fn conflicts(&self, changed: &FieldSet) -> Vec<Conflict> {
        let mut owners: Vec<&Entry> = self.entries.iter().collect();
        owners.sort_by_key(|e| e.manager.identifier());
        owners
            .into_iter()
            .flat_map(|e| {
                e.fields
                    .intersection(changed)
                    .paths()
                    .into_iter()
                    .map(|path| Conflict {
                        manager: e.manager.clone(),
                        path,
                    })
            })
            .collect()
    }

    /// Keeps at most [`MAX_UPDATE_MANAGERS`] `Update` entries (`capManagersManager`): the
    /// oldest beyond that are merged, per API version, into an `ancient-changes` entry that
    /// takes the time of the latest one merged.
    fn cap_updaters(&mut self) {
        let mut updaters: Vec<usize> = (0..self.entries.len())
            .filter(|&i| self.entries[i].manager.operation == Operation::Update)
            .collect();
        if updaters.len() <= MAX_UPDATE_MANAGERS {
            return;
        }
        updaters.sort_by_key(|&i| {
            let e = &self.entries[i];
            (seconds(e.time.as_deref()), e.manager.identifier())
        });
        let mut remaining = updaters.len();
        let mut first_of_version: Vec<(String, usize)> = Vec::new();
        let mut merged_away = vec![false; self.entries.len()];
        for i in updaters {
            if remaining <= MAX_UPDATE_MANAGERS {
                break;
            }
            let version = self.entries[i].manager.api_version.clone();
            let Some(&(_, first)) = first_of_version.iter().find(|(v, _)| *v == version) else {
                first_of_version.push((version, i));
                continue;
            };
            let bucket = Manager {
                name: ANCIENT_CHANGES.to_owned(),
                operation: Operation::Update,
                api_version: version,
                subresource: String::new(),
            };
            let at = match (0..self.entries.len())
                .find(|&b| !merged_away[b] && self.entries[b].manager.same(&bucket))
            {
                Some(at) => at,
                None => {
                    self.entries[first].manager = bucket;
                    first
                }
            };
            let (fields, time) = (self.entries[i].fields.clone(), self.entries[i].time.clone());
            self.entries[at].fields = self.entries[at].fields.union(&fields);
            self.entries[at].time = time;
            merged_away[i] = true;
            remaining -= 1;
        }
        let mut index = 0;
        self.entries.retain(|_| {
            index += 1;
            !merged_away[index - 1]
        });
    }
}

/// One write as the field manager sees it: the object before and after (without managed
/// fields), what its manager never owns, how its lists merge, and the time.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Change<'a> {
    pub(crate) live: &'a Value,
    pub(crate) new: &'a Value,
    pub(crate) ignored: &'a FieldSet,
    pub(crate) shape: Shape,
    pub(crate) now: &'a str,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource::ResourceInfo;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn entry(manager: &str, operation: &str, time: &str, fields: Value) -> Value {
        json!({"manager": manager, "operation": operation, "apiVersion": "v1", "time": time,
            "fieldsType": "FieldsV1", "fieldsV1": fields})
    }

    fn names(managed: &ManagedFields) -> Vec<String> {
        managed
            .encode()
            .unwrap_or_default()
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| e["manager"].as_str().unwrap_or("").to_owned())
            .collect()
    }

    #[test]
    fn entries_read_sort_and_write_as_kube_apiserver_keeps_them() {
        let list = json!([
            entry(
                "b",
                "Update",
                "2026-01-01T00:00:02Z",
                json!({"f:data": {"f:b": {}}})
            ),
            entry(
                "z",
                "Update",
                "2026-01-01T00:00:01Z",
                json!({"f:data": {"f:z": {}}})
            ),
            entry(
                "a",
                "Update",
                "2026-01-01T00:00:02Z",
                json!({"f:data": {"f:a": {}}})
            ),
            entry(
                "y",
                "Apply",
                "2026-01-01T00:00:09Z",
                json!({"f:data": {"f:y": {}}})
            ),
        ]);
        let managed = ManagedFields::decode(&list).unwrap();
        // Apply first, then by time, then by manager.
        assert_eq!(names(&managed), ["y", "z", "a", "b"]);
        let body = json!({"metadata": {"managedFields": list}});
        assert_eq!(ManagedFields::for_write(None, &body, false), managed);
        // Reset markers, entries that do not read, and a subresource write.
        let stored = json!({"metadata": {"managedFields": [entry("s", "Update", "2026-01-01T00:00:00Z", json!({"f:a": {}}))]}});
        let reset = json!({"metadata": {"managedFields": [{}]}});
        assert_eq!(
            ManagedFields::for_write(Some(&stored), &reset, false),
            ManagedFields::default()
        );
        let bad =
            json!({"metadata": {"managedFields": [{"operation": "Bogus", "apiVersion": "v1"}]}});
        assert_eq!(
            names(&ManagedFields::for_write(Some(&stored), &bad, false)),
            ["s"]
        );
        assert_eq!(
            names(&ManagedFields::for_write(Some(&stored), &body, true)),
            ["s"]
        );
        for (entry, error) in [
            (
                json!({"operation": "Update"}),
                "apiVersion must not be empty",
            ),
            (
                json!({"operation": "Update", "apiVersion": "v1"}),
                "missing fieldsType in managed fields entry 0",
            ),
            (
                json!({"operation": "Apply", "apiVersion": "v1", "fieldsType": "FieldsV2"}),
                "invalid fieldsType \"FieldsV2\" in managed fields entry 0",
            ),
        ] {
            assert_eq!(ManagedFields::decode(&json!([entry])).unwrap_err(), error);
        }
    }

    #[test]
    fn past_ten_updaters_the_oldest_merge_into_ancient_changes() {
        let list: Vec<Value> = (0..12)
            .map(|i| {
                entry(
                    &format!("m{i:02}"),
                    "Update",
                    &format!("2026-01-01T00:00:{i:02}Z"),
                    json!({"f:data": {format!("f:k{i}"): {}}}),
                )
            })
            .collect();
        let mut managed = ManagedFields::decode(&Value::Array(list)).unwrap();
        managed.cap_updaters();
        let encoded = managed.encode().unwrap();
        let entries = encoded.as_array().unwrap();
        assert_eq!(entries.len(), 10);
        let ancient = entries
            .iter()
            .find(|e| e["manager"] == ANCIENT_CHANGES)
            .unwrap();
        assert_eq!(ancient["time"], "2026-01-01T00:00:02Z");
        assert_eq!(
            ancient["fieldsV1"],
            json!({"f:data": {"f:k0": {}, "f:k1": {}, "f:k2": {}}})
        );
        assert!(
            entries
                .iter()
                .all(|e| e["manager"] != "m00" && e["manager"] != "m02")
        );
    }

    #[test]
    fn an_update_takes_the_fields_it_changes_from_every_other_manager() {
        let info = ResourceInfo::of::<ConfigMap>();
        let mut managed = ManagedFields::default();
        let none = FieldSet::default();
        let write =
            |managed: &mut ManagedFields, live: &Value, new: &Value, who: &str, now: &str| {
                let change = Change {
                    live,
                    new,
                    ignored: &none,
                    shape: Shape::of(&info),
                    now,
                };
                managed.record_update(change, Manager::of(&info, who, Operation::Update, false));
            };
        let empty = json!({"metadata": {}});
        let first = json!({"metadata": {"name": "x"}, "data": {"a": "1", "b": "1"}});
        write(&mut managed, &empty, &first, "one", "2026-01-01T00:00:00Z");
        let second = json!({"metadata": {"name": "x"}, "data": {"a": "2"}});
        write(&mut managed, &first, &second, "two", "2026-01-01T00:00:05Z");
        let encoded = managed.encode().unwrap();
        assert_eq!(encoded[0]["manager"], "one");
        // "one" keeps the map it added; "two" owns what it changed; `b` is gone for both.
        assert_eq!(encoded[0]["fieldsV1"], json!({"f:data": {}}));
        assert_eq!(encoded[1]["manager"], "two");
        assert_eq!(encoded[1]["fieldsV1"], json!({"f:data": {"f:a": {}}}));
        // A write that changes nothing moves no time and adds no entry.
        write(
            &mut managed,
            &second,
            &second,
            "three",
            "2026-01-01T00:00:09Z",
        );
        assert_eq!(managed.encode().unwrap(), encoded);
    }
}
