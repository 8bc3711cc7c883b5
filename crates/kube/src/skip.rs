//! Leaving `metadata.managedFields` out of an object while it is decoded.
//!
//! [`strip_managed_fields`](crate::strip_managed_fields) drops the managed fields of an object
//! that has been decoded whole: the decoder has built every `fieldsV1` tree (one allocation per
//! node) and the transform frees them again. Skipping them in the decoder builds nothing: the
//! bytes are still read (JSON has no way to jump over a value), but as serde's
//! [`IgnoredAny`], which allocates nothing.
//!
//! The skipping is a [`Deserializer`] wrapper ([`Filter`]) that sits between serde_json and the
//! object's own `Deserialize`: at the object's top level it watches for the `metadata` key and
//! decodes that value through a second wrapper, which passes every key of the metadata object
//! on except `managedFields`, whose value it skips. Every other value (and every other key,
//! such as a label or an annotation called `managedFields`) goes to the object's own decoder
//! untouched, so the result is exactly the object decoded whole with
//! `metadata.managed_fields` set to `None`, and an error (including serde_json's "ended
//! early", which the watch decoder's rules rely on) is the same error.

use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::de::{
    self, DeserializeSeed, Deserializer, EnumAccess, IgnoredAny, MapAccess, SeqAccess, Visitor,
};
use serde::{Deserialize, Serialize};

/// `K` decoded without its `metadata.managedFields`: what the adapter decodes list items and
/// watch objects as when they are left out
/// ([`KubeListerWatcher::without_managed_fields`](crate::KubeListerWatcher::without_managed_fields)),
/// for code that decodes objects itself. The result is `K` decoded whole with
/// `metadata.managed_fields` set to `None`, without the managed fields ever being built. One
/// difference in errors: serde_json reads a skipped value more loosely at the end of a cut
/// input (a number cut after its `-` is a syntax error, not "EOF"); the adapter decodes such a
/// text whole to tell a cut input apart.
///
/// ```
/// use informer_kube::WithoutManagedFields;
/// use k8s_openapi::api::core::v1::Pod;
///
/// let json = r#"{"metadata":{"name":"web-0","managedFields":[{"manager":"kubelet"}]}}"#;
/// let WithoutManagedFields(pod) = serde_json::from_str::<WithoutManagedFields<Pod>>(json).unwrap();
/// assert_eq!(pod.metadata.name.as_deref(), Some("web-0"));
/// assert_eq!(pod.metadata.managed_fields, None);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(transparent)]
pub struct WithoutManagedFields<K>(pub K);

impl<'de, K: Deserialize<'de>> Deserialize<'de> for WithoutManagedFields<K> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        K::deserialize(Filter {
            inner: deserializer,
            level: Level::Object,
        })
        .map(Self)
    }
}

/// Decodes an [`ObjectMeta`] without its `managedFields`, for the `metadata` field of a
/// partial type (`#[serde(deserialize_with = "...")]`): a projection that keeps only a few
/// fields of an object then never builds the managed fields at all, which are most of a
/// real object's metadata.
///
/// ```
/// use informer_kube::metadata_without_managed_fields;
/// use kube::api::ObjectMeta;
/// use serde::Deserialize;
///
/// #[derive(Deserialize)]
/// struct Slim {
///     #[serde(deserialize_with = "metadata_without_managed_fields")]
///     metadata: ObjectMeta,
/// }
///
/// let slim: Slim = serde_json::from_str(
///     r#"{"metadata":{"name":"web-0","managedFields":[{"manager":"kubectl"}]}}"#,
/// )
/// .unwrap();
/// assert_eq!(slim.metadata.name.as_deref(), Some("web-0"));
/// assert_eq!(slim.metadata.managed_fields, None);
/// ```
pub fn metadata_without_managed_fields<'de, D>(deserializer: D) -> Result<ObjectMeta, D::Error>
where
    D: Deserializer<'de>,
{
    ObjectMeta::deserialize(Filter {
        inner: deserializer,
        level: Level::Metadata,
    })
}

/// Which object a [`Filter`] is decoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Level {
    /// The object itself: its `metadata` value is decoded at [`Level::Metadata`].
    Object,
    /// The object's metadata: its `managedFields` value is skipped.
    Metadata,
}

/// A [`Deserializer`] that hands a map's entries on, with the changes of its [`Level`]; every
/// other kind of value goes through unchanged.
struct Filter<D> {
    inner: D,
    level: Level,
}

macro_rules! forward {
    ($($method:ident)*) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
            self.inner.$method(visitor)
        }
    )*};
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Filter<D> {
    type Error = D::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.inner.deserialize_any(FilterVisitor {
            inner: visitor,
            level: self.level,
        })
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.inner.deserialize_map(FilterVisitor {
            inner: visitor,
            level: self.level,
        })
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.inner.deserialize_struct(
            name,
            fields,
            FilterVisitor {
                inner: visitor,
                level: self.level,
            },
        )
    }

    forward! {
        deserialize_bool deserialize_i8 deserialize_i16 deserialize_i32 deserialize_i64
        deserialize_i128 deserialize_u8 deserialize_u16 deserialize_u32 deserialize_u64
        deserialize_u128 deserialize_f32 deserialize_f64 deserialize_char deserialize_str
        deserialize_string deserialize_bytes deserialize_byte_buf deserialize_unit deserialize_seq deserialize_identifier deserialize_ignored_any
    }

    /// An `Option<T>` field (as k8s-openapi decodes `metadata`): the `T` inside is filtered.
    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.inner.deserialize_option(FilterVisitor {
            inner: visitor,
            level: self.level,
        })
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.inner.deserialize_unit_struct(name, visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.inner.deserialize_newtype_struct(name, visitor)
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.inner.deserialize_tuple(len, visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.inner.deserialize_tuple_struct(name, len, visitor)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.inner.deserialize_enum(name, variants, visitor)
    }

    fn is_human_readable(&self) -> bool {
        self.inner.is_human_readable()
    }
}

/// The object's own visitor, given a [`FilterMap`] instead of the decoder's map.
struct FilterVisitor<V> {
    inner: V,
    level: Level,
}

macro_rules! forward_visit {
    ($($method:ident($ty:ty))*) => {$(
        fn $method<E: de::Error>(self, v: $ty) -> Result<V::Value, E> {
            self.inner.$method(v)
        }
    )*};
}

impl<'de, V: Visitor<'de>> Visitor<'de> for FilterVisitor<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.expecting(f)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        self.inner.visit_map(FilterMap {
            inner: map,
            level: self.level,
            metadata_next: false,
        })
    }

    forward_visit! {
        visit_bool(bool) visit_i64(i64) visit_i128(i128) visit_u64(u64) visit_u128(u128)
        visit_f64(f64) visit_char(char) visit_str(&str) visit_borrowed_str(&'de str)
        visit_string(String) visit_bytes(&[u8]) visit_borrowed_bytes(&'de [u8])
        visit_byte_buf(Vec<u8>)
    }

    fn visit_none<E: de::Error>(self) -> Result<V::Value, E> {
        self.inner.visit_none()
    }

    fn visit_unit<E: de::Error>(self) -> Result<V::Value, E> {
        self.inner.visit_unit()
    }

    fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> Result<V::Value, D2::Error> {
        self.inner.visit_some(Filter {
            inner: d,
            level: self.level,
        })
    }

    fn visit_newtype_struct<D2: Deserializer<'de>>(self, d: D2) -> Result<V::Value, D2::Error> {
        self.inner.visit_newtype_struct(d)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<V::Value, A::Error> {
        self.inner.visit_seq(seq)
    }

    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<V::Value, A::Error> {
        self.inner.visit_enum(data)
    }
}

/// A map's entries as the object's visitor sees them: at [`Level::Metadata`] without
/// `managedFields`; at [`Level::Object`] with the `metadata` value decoded through a
/// metadata-level [`Filter`].
struct FilterMap<A> {
    inner: A,
    level: Level,
    /// The key just handed on was the object's `metadata`.
    metadata_next: bool,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for FilterMap<A> {
    type Error = A::Error;

    fn next_key_seed<S: DeserializeSeed<'de>>(
        &mut self,
        mut seed: S,
    ) -> Result<Option<S::Value>, A::Error> {
        loop {
            let key = self.inner.next_key_seed(KeySeed {
                seed,
                level: self.level,
            })?;
            match key {
                None => return Ok(None),
                Some(Key::Skipped(back)) => {
                    self.inner.next_value::<IgnoredAny>()?;
                    seed = back;
                }
                Some(Key::Kept { key, metadata }) => {
                    self.metadata_next = metadata;
                    return Ok(Some(key));
                }
            }
        }
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, A::Error> {
        if std::mem::take(&mut self.metadata_next) {
            self.inner.next_value_seed(FilterSeed {
                seed,
                level: Level::Metadata,
            })
        } else {
            self.inner.next_value_seed(seed)
        }
    }

    fn size_hint(&self) -> Option<usize> {
        // One entry may be skipped: a hint must not promise more than there is.
        None
    }
}

/// A value decoded by `seed` through a [`Filter`] at `level`.
struct FilterSeed<S> {
    seed: S,
    level: Level,
}

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for FilterSeed<S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<S::Value, D::Error> {
        self.seed.deserialize(Filter {
            inner: deserializer,
            level: self.level,
        })
    }
}

/// A key read by a [`KeySeed`].
enum Key<S, K> {
    /// A key whose entry is left out; the object's seed, unused, for the next key.
    Skipped(S),
    /// A key as the object's seed decoded it; `metadata`: it is the object's metadata.
    Kept { key: K, metadata: bool },
}

/// Reads a key as a string, and hands it to the object's own key seed unless it is skipped.
struct KeySeed<S> {
    seed: S,
    level: Level,
}

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for KeySeed<S> {
    type Value = Key<S, S::Value>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<S> KeySeed<S> {
    fn skips(&self, key: &str) -> bool {
        self.level == Level::Metadata && key == "managedFields"
    }

    fn is_metadata(&self, key: &str) -> bool {
        self.level == Level::Object && key == "metadata"
    }
}

impl<'de, S: DeserializeSeed<'de>> Visitor<'de> for KeySeed<S> {
    type Value = Key<S, S::Value>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a field name")
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        if self.skips(v) {
            return Ok(Key::Skipped(self.seed));
        }
        let metadata = self.is_metadata(v);
        let key = self
            .seed
            .deserialize(de::value::BorrowedStrDeserializer::new(v))?;
        Ok(Key::Kept { key, metadata })
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        if self.skips(v) {
            return Ok(Key::Skipped(self.seed));
        }
        let metadata = self.is_metadata(v);
        let key = self.seed.deserialize(de::value::StrDeserializer::new(v))?;
        Ok(Key::Kept { key, metadata })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ConfigMap, Pod};
    use kube::api::DynamicObject;
    use kube::core::PartialObjectMeta;
    use proptest::prelude::*;
    use serde::de::DeserializeOwned;
    use serde_json::{Value, json};

    /// The model: the object decoded whole from its JSON with `metadata.managedFields` taken
    /// out of the text.
    fn model<K: DeserializeOwned>(text: &str) -> Option<K> {
        let mut value: Value = serde_json::from_str(text).ok()?;
        if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("managedFields");
        }
        serde_json::from_str(&value.to_string()).ok()
    }

    /// Decoded as the adapter decodes without managed fields.
    fn skipped<K: DeserializeOwned>(text: &str) -> Result<K, serde_json::Error> {
        let decoding = crate::decode::Decoding {
            skip_managed_fields: true,
            ..Default::default()
        };
        decoding.decode(text, |o: WithoutManagedFields<K>| o.0)
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i32>().prop_map(Value::from),
            "[a-zA-Z:.\"\\\\]{0,8}".prop_map(Value::from),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
                prop::collection::btree_map("[a-z:.]{1,6}|managedFields|metadata", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// A pod with managed fields (and keys called `managedFields` or `metadata` where they are
    /// data: a label, an annotation, inside `fieldsV1`), its keys in a drawn order.
    fn pod() -> impl Strategy<Value = String> {
        (
            "[a-z]{1,8}",
            prop::collection::vec(("[a-z]{1,6}", json_value()), 0..3),
            any::<bool>(),
            any::<bool>(),
            0usize..4,
        )
            .prop_map(|(name, managers, labelled, null_fields, order)| {
                let managed: Vec<Value> = managers
                    .into_iter()
                    .map(|(manager, fields)| {
                        json!({"manager": manager, "operation": "Update",
                               "fieldsType": "FieldsV1", "fieldsV1": fields})
                    })
                    .collect();
                let mut meta = serde_json::Map::new();
                meta.insert("name".into(), json!(name));
                meta.insert(
                    "managedFields".into(),
                    if null_fields {
                        Value::Null
                    } else {
                        Value::from(managed)
                    },
                );
                meta.insert("resourceVersion".into(), json!("7"));
                if labelled {
                    meta.insert(
                        "labels".into(),
                        json!({"managedFields": "x", "metadata": "y"}),
                    );
                    meta.insert("annotations".into(), json!({"managedFields": "z"}));
                }
                let mut pod = vec![
                    ("apiVersion", json!("v1")),
                    ("kind", json!("Pod")),
                    ("metadata", Value::Object(meta)),
                    (
                        "spec",
                        json!({"nodeName": "n1", "containers": [{"name": "c"}]}),
                    ),
                    ("managedFields", json!([1, 2])),
                ];
                pod.rotate_left(order);
                Value::Object(pod.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()).to_string()
            })
    }

    proptest! {
        #[test]
        fn a_pod_decoded_without_managed_fields_is_the_pod_decoded_then_stripped(text in pod()) {
            let mut stripped: Pod = serde_json::from_str(&text).unwrap();
            stripped.metadata.managed_fields = None;
            prop_assert_eq!(skipped::<Pod>(&text).ok(), Some(stripped));
            let meta = model::<PartialObjectMeta<Pod>>(&text);
            prop_assert!(meta.is_some());
            let as_value = |m: PartialObjectMeta<Pod>| serde_json::to_value(m).unwrap();
            prop_assert_eq!(
                skipped::<PartialObjectMeta<Pod>>(&text).ok().map(as_value),
                meta.map(as_value)
            );
            let dynamic = model::<DynamicObject>(&text);
            prop_assert!(dynamic.is_some());
            prop_assert_eq!(skipped::<DynamicObject>(&text).ok(), dynamic);
        }

        #[test]
        fn a_cut_pod_fails_as_the_whole_decoder_fails(text in pod(), cut in any::<prop::sample::Index>()) {
            let text = &text[..cut.index(text.len())];
            let whole = serde_json::from_str::<Pod>(text).unwrap_err();
            let skipping = skipped::<Pod>(text).unwrap_err();
            prop_assert_eq!(whole.is_eof(), skipping.is_eof());
            prop_assert_eq!(whole.classify(), skipping.classify());
        }

        #[test]
        fn arbitrary_json_decodes_or_fails_as_the_whole_decoder_does(value in json_value()) {
            let text = json!({"metadata": value.clone(), "data": value}).to_string();
            prop_assert_eq!(skipped::<ConfigMap>(&text).ok(), model::<ConfigMap>(&text));
        }
    }

    #[test]
    fn the_metadata_helper_leaves_out_the_managed_fields_and_keeps_the_rest() {
        let text = r#"{"name":"a","managedFields":[{"manager":"m","fieldsV1":{"f:x":{}}}],
                       "labels":{"managedFields":"kept"},"resourceVersion":"3"}"#;
        let meta =
            metadata_without_managed_fields(&mut serde_json::Deserializer::from_str(text)).unwrap();
        assert_eq!(meta.managed_fields, None);
        assert_eq!(meta.name.as_deref(), Some("a"));
        assert_eq!(meta.resource_version.as_deref(), Some("3"));
        assert_eq!(meta.labels.unwrap()["managedFields"], "kept");
    }

    #[test]
    fn a_type_error_in_the_skipped_value_is_not_an_error_and_elsewhere_it_is() {
        // Skipped: any JSON is accepted where the managed fields were.
        let pod: Pod = skipped(r#"{"metadata":{"name":"a","managedFields":7}}"#).unwrap();
        assert_eq!(pod.metadata.name.as_deref(), Some("a"));
        assert!(skipped::<Pod>(r#"{"metadata":{"name":7}}"#).is_err());
        assert!(skipped::<Pod>(r#"{"metadata":[]}"#).is_err());
    }
}
