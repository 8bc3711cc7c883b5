//! Object metadata: the fields the server sets (`uid`, `creationTimestamp`, `generation`, the
//! deletion marks), the name rules, and the accessors every write uses.

use rand::Rng;
use serde_json::{Map, Value};

use crate::resource::ResourceInfo;
use crate::strategy;

pub(crate) fn now_rfc3339() -> String {
    let now = jiff::Timestamp::now();
    // Whole seconds, `Z` suffix: how metav1.Time serialises.
    jiff::Timestamp::from_second(now.as_second())
        .map(|t| t.to_string())
        .unwrap_or_else(|_| now.to_string())
}

pub(crate) fn new_uid() -> String {
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

pub(crate) fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    (0..5)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}

pub(crate) const DNS1123_SUBDOMAIN_ERROR: &str = "a lowercase RFC 1123 subdomain must consist of lower case \
    alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character \
    (e.g. 'example.com', regex used for validation is \
    '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

pub(crate) fn is_dns1123_subdomain(name: &str) -> bool {
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

/// The `metadata` object of `value`, made an object (and `value` one) if it is not.
pub(crate) fn meta_mut(value: &mut Value) -> &mut Map<String, Value> {
    if !value.is_object() {
        *value = Value::Object(Map::new());
    }
    let Value::Object(obj) = value else {
        unreachable!("made an object above")
    };
    let meta = obj
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    meta.as_object_mut().expect("just made an object")
}

/// The metadata an update cannot set, taken from the stored object `old`: the name of the
/// URL, the system fields and the deletion marks (only a delete sets those), the generation
/// (bumped when the spec changed, for types that track it; see
/// [`strategy::generation_changes`]) and the resourceVersion.
pub(crate) fn keep_system_metadata(info: &ResourceInfo, name: &str, body: &mut Value, old: &Value) {
    let old_meta = meta(old).cloned().unwrap_or_default();
    let spec_changed = strategy::generation_changes(info, old, body);
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
pub(crate) fn deletes_during_update(old: &Value, body: &Value) -> bool {
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
