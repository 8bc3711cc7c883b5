//! The message table: every message of the Kubernetes API, its fields by number, each with its
//! JSON name (the serde name of k8s-openapi's field) and kind. Generated into `table.rs` by
//! `schema/generate.py` from the k8s-pb crate (the shapes of the upstream `generated.proto`
//! files) and k8s-openapi (the JSON names).

mod table;

use std::collections::HashMap;
use std::sync::LazyLock;

/// A message of the table.
#[derive(Debug)]
pub(crate) struct Message {
    /// Its full protobuf name (`k8s.io.api.core.v1.Pod`).
    pub(crate) name: &'static str,
    /// How its JSON form differs from an object of its fields.
    pub(crate) special: Special,
    /// Its fields, by ascending number.
    pub(crate) fields: &'static [Field],
}

/// Messages whose JSON form is not an object of their fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Special {
    /// An object of its fields.
    None,
    /// `meta.v1.Time`: `{seconds, nanos}`, an RFC 3339 string to the second.
    Time,
    /// `meta.v1.MicroTime`: an RFC 3339 string to the microsecond.
    MicroTime,
    /// `meta.v1.Duration`: nanoseconds, Go's duration string (`1h2m3s`).
    Duration,
    /// `FieldsV1` and `RawExtension`: bytes that hold JSON (or an enveloped protobuf object).
    RawJson,
    /// `resource.Quantity`: its `string`.
    Quantity,
    /// `intstr.IntOrString`: its `intVal` or `strVal`, as `type` says.
    IntOrString,
    /// `ExtraValue`, `meta.v1.Verbs`: the list of their `items`.
    Items,
    /// `JSONSchemaPropsOrBool`: its schema, or its bool.
    SchemaOrBool,
    /// `JSONSchemaPropsOrArray` and `…OrStringArray`: their list, or their schema.
    SchemaOrArray,
}

/// A field of a message.
#[derive(Debug)]
pub(crate) struct Field {
    pub(crate) number: u32,
    /// The JSON name.
    pub(crate) name: &'static str,
    pub(crate) kind: Kind,
    /// [`REPEATED`], [`INLINE`], [`KEEP_EMPTY`].
    pub(crate) flags: u8,
}

/// A `repeated` field: a JSON array of its occurrences.
pub(crate) const REPEATED: u8 = 1;
/// Go's embedded struct: its fields are the parent object's (`Volume.volumeSource`).
pub(crate) const INLINE: u8 = 2;
/// A pointer to a string in Go, whose empty value is a value (otherwise an empty string is Go's
/// zero of an `omitempty` field, which JSON leaves out).
pub(crate) const KEEP_EMPTY: u8 = 4;

impl Field {
    #[inline(always)]
    pub(crate) fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }
}

/// What a field holds.
#[derive(Debug)]
pub(crate) enum Kind {
    /// One value (or, with [`REPEATED`], a list of them).
    Value(Value),
    /// `map<string, V>`: entries of `{1: key, 2: value}`.
    Map(&'static Value),
}

/// A value's type.
#[derive(Debug)]
pub(crate) enum Value {
    Str,
    Bytes,
    Bool,
    I32,
    I64,
    F64,
    /// A message: its index in the table.
    Msg(u16),
}

impl Value {
    pub(crate) fn message(index: u16) -> &'static Message {
        &table::MESSAGES[usize::from(index)]
    }
}

/// By full name, lowercased: the table's names are prost's, which spell some acronyms as words
/// (`HttpGetAction` for `HTTPGetAction`), so a kind is looked up without regard to case.
static BY_NAME: LazyLock<HashMap<String, &'static Message>> = LazyLock::new(|| {
    table::MESSAGES
        .iter()
        .map(|m| (m.name.to_ascii_lowercase(), m))
        .collect()
});

/// The message of a full protobuf name (any case).
pub(crate) fn by_name(name: &str) -> Option<&'static Message> {
    BY_NAME.get(&name.to_ascii_lowercase()).copied()
}

/// The message of an `apiVersion` and `kind`, if the table has it: `v1` is `k8s.io.api.core.v1`,
/// `apps/v1` is `k8s.io.api.apps.v1`, `meta.k8s.io/v1` and the kinds `Status`, `WatchEvent`,
/// `Table` and `PartialObjectMetadata` are apimachinery's `meta.v1`, and the API extension and
/// aggregation groups have their own packages.
pub(crate) fn for_kind(api_version: &str, kind: &str) -> Option<&'static Message> {
    const META: &str = "k8s.io.apimachinery.pkg.apis.meta.v1";
    let package = match api_version.split_once('/') {
        _ if matches!(kind, "Status" | "WatchEvent") => META.to_owned(),
        None => format!("k8s.io.api.core.{api_version}"),
        Some(("meta.k8s.io", version)) => format!("k8s.io.apimachinery.pkg.apis.meta.{version}"),
        Some(("apiextensions.k8s.io", version)) => {
            format!("k8s.io.apiextensions_apiserver.pkg.apis.apiextensions.{version}")
        }
        Some(("apiregistration.k8s.io", version)) => {
            format!("k8s.io.kube_aggregator.pkg.apis.apiregistration.{version}")
        }
        Some(("internal.apiserver.k8s.io", version)) => {
            format!("k8s.io.api.apiserverinternal.{version}")
        }
        Some((group, version)) => {
            // `apps`, `batch`: the group; `rbac.authorization.k8s.io`: its first label. A group
            // outside k8s.io is a custom resource's.
            if group.contains('.') && !group.ends_with(".k8s.io") {
                return None;
            }
            let short = group.split('.').next().unwrap_or(group);
            format!("k8s.io.api.{short}.{version}")
        }
    };
    by_name(&format!("{package}.{kind}"))
}

impl Message {
    /// Its index in the table.
    #[inline(always)]
    pub(crate) fn index(&'static self) -> u16 {
        let offset = std::ptr::from_ref(self) as usize - table::MESSAGES.as_ptr() as usize;
        (offset / std::mem::size_of::<Message>()) as u16
    }

    /// The field of `number`; looked for at index `number - 1`, then at `hint` (the field after
    /// the last one read: encoders write fields in ascending order).
    #[inline(always)]
    pub(crate) fn field(&self, number: u32, hint: &mut usize) -> Option<&'static Field>
    where
        Self: 'static,
    {
        let fields = self.fields;
        // Most messages number their fields 1, 2, 3, … (all but a few of the table's fields
        // are at index `number - 1`).
        let dense = (number as usize).wrapping_sub(1);
        if let Some(f) = fields.get(dense).filter(|f| f.number == number) {
            *hint = dense + 1;
            return Some(f);
        }
        if let Some(f) = fields.get(*hint).filter(|f| f.number == number) {
            *hint += 1;
            return Some(f);
        }
        let i = fields.binary_search_by_key(&number, |f| f.number).ok()?;
        *hint = i + 1;
        Some(&fields[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_in_kinds_have_messages_and_custom_ones_do_not() {
        for (v, k) in [
            ("v1", "Pod"),
            ("v1", "PodList"),
            ("v1", "Status"),
            ("apps/v1", "Deployment"),
            ("batch/v1", "Job"),
            ("networking.k8s.io/v1", "Ingress"),
            ("rbac.authorization.k8s.io/v1", "ClusterRole"),
            ("coordination.k8s.io/v1", "Lease"),
            ("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
            ("apiregistration.k8s.io/v1", "APIService"),
            ("meta.k8s.io/v1", "PartialObjectMetadataList"),
        ] {
            assert!(for_kind(v, k).is_some(), "{v} {k}");
        }
        assert!(for_kind("example.com/v1", "Widget").is_none());
        assert!(for_kind("v1", "Widget").is_none());
    }

    #[test]
    fn every_field_list_is_sorted_and_every_message_index_resolves() {
        for message in &table::MESSAGES {
            assert!(
                message.fields.windows(2).all(|w| w[0].number < w[1].number),
                "{}",
                message.name
            );
            for field in message.fields {
                let value = match &field.kind {
                    Kind::Value(v) => v,
                    Kind::Map(v) => v,
                };
                if let Value::Msg(i) = value {
                    assert!(usize::from(*i) < table::MESSAGES.len());
                }
            }
        }
        let pod = for_kind("v1", "Pod").unwrap();
        let mut hint = 0;
        assert_eq!(pod.field(1, &mut hint).unwrap().name, "metadata");
        assert_eq!(pod.field(3, &mut hint).unwrap().name, "status");
        assert!(pod.field(99, &mut hint).is_none());
    }
}
