//! Decoders generated per k8s-openapi type: a message read straight into the struct's fields,
//! without serde in between.
//!
//! The serde path ([`MessageType::decode`]) presents a message as the map its JSON form would be,
//! and the type's own `Deserialize` reads it: it matches every key's name against its fields,
//! parks each value in an `Option` local and moves them all into the struct at the end, and a
//! `Time` is written as RFC 3339 text that the type parses again. Here the same walk through the
//! wire ([`Walk`], shared with the serde path) hands each field's value to a `match` on its field
//! number generated for the type ([`generated`], by `schema/generate.py`), which writes it into
//! the struct's field in place: a nested message is merged into a default value already in its
//! slot (`Option<PodSpec>`, a `Vec<Container>`'s new element), a time is made from its seconds
//! and nanoseconds. The kinds of values ([`kinds`]: strings, numbers, `Option`, `Vec`,
//! `BTreeMap`, `Quantity`, `IntOrString`, `Time`, `ByteString`) are one trait, so the generated
//! code is only a table of field numbers to field names, and the Rust types pick the rest.
//!
//! What is read is exactly what the serde path reads into the same type (the tests compare both
//! on every type the API server simulator encodes, and the fuzz target on arbitrary bytes): the
//! same empty-string, zero, embedded-struct, unknown-field and depth rules, the same errors for
//! bad input. Values whose JSON form is JSON (`FieldsV1`, `RawExtension`), the wrapper types of
//! apiextensions, and the two types whose `Deserialize` refuses a missing field (meta/v1
//! `Condition`, events/v1 `EventSeries`) go through serde inside a generated decoder.

mod field;
mod generated;
mod kinds;

use std::any::{Any, TypeId};
use std::marker::PhantomData;
use std::sync::Arc;

use crate::Error;
use crate::de::Nested;
use crate::envelope::{Envelope, MessageType};
use crate::schema::Value;

mod sealed {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use smallvec::SmallVec;

    use crate::Error;
    use crate::schema::Field;

    /// The generated part of a [`ProtoMessage`](super::ProtoMessage): implemented by the
    /// generated code only.
    pub trait Merge: Default {
        /// The index of the type's message in the table.
        const MESSAGE: u16;

        /// Reads the fields of `buf`, a message of the type's, into `self`, one level of
        /// nesting already entered.
        fn merge(&mut self, buf: &[u8], level: &mut Level) -> Result<(), Error>;

        /// Its `metadata`, if that is an `ObjectMeta`.
        fn object_meta_mut(&mut self) -> Option<&mut ObjectMeta> {
            None
        }

        /// `apiVersion` and `kind`, for a resource type.
        fn resource_type() -> Option<(&'static str, &'static str)> {
            None
        }
    }

    /// One message being read (with the Go structs embedded in it).
    #[derive(Debug, Default)]
    pub struct Level {
        /// Its repeated and map fields read so far: each may have one run.
        pub(crate) done: SmallVec<[&'static Field; 8]>,
        /// At an object's top level: its `metadata` is read without its managed fields; at
        /// that `ObjectMeta`'s level: `managedFields` is walked over.
        pub(crate) skip_managed_fields: bool,
    }
}

pub(crate) use self::sealed::{Level, Merge};

/// A k8s-openapi type with a decoder generated for it: every struct of the Kubernetes API that
/// the protobuf schema has (`Pod`, `PodSpec`, `ObjectMeta`, `Deployment`, …), in the version of
/// k8s-openapi the application picked. Read one with [`MessageType::decode_generated`] or
/// [`Envelope::decode_generated`], or, for a type known only as a type parameter, through
/// [`Generated`].
pub trait ProtoMessage: Merge + serde::de::DeserializeOwned + Send + Sync + 'static {}

impl<T: Merge + serde::de::DeserializeOwned + Send + Sync + 'static> ProtoMessage for T {}

/// How a generated decoder reads an object.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DecodeOptions {
    skip_managed_fields: bool,
}

impl DecodeOptions {
    /// Everything read (the default).
    pub fn new() -> Self {
        Self::default()
    }

    /// Leaves the object's `metadata.managedFields` out, walked over unread (its wire form is
    /// still checked): the object is the one read whole with `managed_fields` set to `None`.
    pub fn without_managed_fields(mut self) -> Self {
        self.skip_managed_fields = true;
        self
    }

    /// Whether `metadata.managedFields` is left out.
    pub fn skips_managed_fields(&self) -> bool {
        self.skip_managed_fields
    }
}

impl MessageType {
    /// Bare message bytes (a list's item) as a `T`, through `T`'s generated decoder: what
    /// [`decode`](Self::decode) reads, faster. A message of another type than `T`'s is read by
    /// the serde path.
    pub fn decode_generated<T: ProtoMessage>(
        &self,
        bytes: &[u8],
        options: DecodeOptions,
    ) -> Result<T, Error> {
        let mut object = T::default();
        self.decode_generated_into(bytes, &mut object, options)?;
        Ok(object)
    }

    /// As [`decode_generated`](Self::decode_generated), into `object`, which must be
    /// `T::default()` (an `Arc` made before it is filled, say): each field read is written over.
    pub fn decode_generated_into<T: ProtoMessage>(
        &self,
        bytes: &[u8],
        object: &mut T,
        options: DecodeOptions,
    ) -> Result<(), Error> {
        if self.0.index() != T::MESSAGE {
            *object = self.decode(bytes)?;
            strip(object, options);
            return Ok(());
        }
        merge_object(object, bytes, options)
    }
}

impl Envelope<'_> {
    /// The object as a `T` through `T`'s generated decoder: what [`decode`](Self::decode)
    /// reads, faster (its `apiVersion` and `kind` checked against `T`'s, as k8s-openapi does).
    pub fn decode_generated<T: ProtoMessage>(&self, options: DecodeOptions) -> Result<T, Error> {
        let mut object = T::default();
        self.decode_generated_into(&mut object, options)?;
        Ok(object)
    }

    /// As [`decode_generated`](Self::decode_generated), into `object`, which must be
    /// `T::default()`.
    pub fn decode_generated_into<T: ProtoMessage>(
        &self,
        object: &mut T,
        options: DecodeOptions,
    ) -> Result<(), Error> {
        let Some((api_version, kind)) = T::resource_type() else {
            *object = self.decode()?;
            strip(object, options);
            return Ok(());
        };
        let message = if (self.api_version, self.kind) == (api_version, kind) {
            Value::message(T::MESSAGE)
        } else {
            self.message()?.0
        };
        // k8s-openapi's own check of a resource's type, where the serde path meets it.
        for (found, expected) in [(self.api_version, api_version), (self.kind, kind)] {
            if !found.is_empty() && found != expected {
                return Err(serde::de::Error::invalid_value(
                    serde::de::Unexpected::Str(found),
                    &expected,
                ));
            }
        }
        if message.index() != T::MESSAGE {
            *object = self.decode()?;
            strip(object, options);
            return Ok(());
        }
        merge_object(object, self.raw, options)
    }
}

/// `object` without its managed fields, if `options` say so.
fn strip<T: Merge>(object: &mut T, options: DecodeOptions) {
    if options.skip_managed_fields
        && let Some(metadata) = object.object_meta_mut()
    {
        metadata.managed_fields = None;
    }
}

/// An object's top level: its fields read into `target`, its `metadata` without its managed
/// fields if `options` say so.
fn merge_object<T: Merge>(
    target: &mut T,
    bytes: &[u8],
    options: DecodeOptions,
) -> Result<(), Error> {
    let _nested = Nested::enter()?;
    let mut level = Level {
        skip_managed_fields: options.skip_managed_fields,
        ..Level::default()
    };
    target.merge(bytes, &mut level)
}

/// An object in its `Arc`, its type erased.
type Erased = Arc<dyn Any + Send + Sync>;

/// A generated decoder with its type erased: found by [`TypeId`], for [`Generated`].
#[derive(Debug, Clone, Copy)]
struct Typed {
    message: fn(MessageType, &[u8], DecodeOptions) -> Result<Erased, Error>,
    envelope: fn(&Envelope<'_>, DecodeOptions) -> Result<Erased, Error>,
}

/// `T`'s decoder if `K` is `T`.
#[inline(always)]
fn typed<K: 'static, T: ProtoMessage>() -> Option<Typed> {
    (TypeId::of::<K>() == TypeId::of::<T>()).then_some(Typed {
        message: |message, bytes, options| {
            let mut object = Arc::new(T::default());
            let target = Arc::get_mut(&mut object).ok_or_else(unshared)?;
            message.decode_generated_into(bytes, target, options)?;
            Ok(object)
        },
        envelope: |envelope, options| {
            let mut object = Arc::new(T::default());
            let target = Arc::get_mut(&mut object).ok_or_else(unshared)?;
            envelope.decode_generated_into(target, options)?;
            Ok(object)
        },
    })
}

fn unshared() -> Error {
    Error::Invalid("a new object's Arc is shared".into())
}

/// The generated decoder of a type known only as a type parameter (an informer's `K`): found at
/// run time by the type's [`TypeId`], for the resource types (those with `apiVersion` and
/// `kind`) of the k8s-openapi version the application picked. Each object is decoded into its
/// own `Arc`, allocated once and filled in place.
///
/// ```
/// use informer_protobuf::{DecodeOptions, Generated, MessageType};
/// use k8s_openapi::api::core::v1::ConfigMap;
///
/// let generated = Generated::<ConfigMap>::find().expect("a built-in resource type");
/// let bytes = [0x0a, 0x03, 0x0a, 0x01, b'a', 0x12, 0x06, 0x0a, 0x01, b'k', 0x12, 0x01, b'v'];
/// let config_map = MessageType::for_kind("v1", "ConfigMap").unwrap();
/// let object = generated.decode_message(config_map, &bytes, DecodeOptions::new())?;
/// assert_eq!(object.metadata.name.as_deref(), Some("a"));
/// assert!(Generated::<serde_json::Value>::find().is_none());
/// # Ok::<(), informer_protobuf::Error>(())
/// ```
#[derive(Debug)]
pub struct Generated<K> {
    typed: Typed,
    object: PhantomData<fn() -> K>,
}

impl<K> Clone for Generated<K> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K> Copy for Generated<K> {}

impl<K: Send + Sync + 'static> Generated<K> {
    /// `K`'s generated decoder; `None` if `K` has none (a projection, a custom resource, a type
    /// that is not a resource).
    pub fn find() -> Option<Self> {
        generated::find::<K>().map(|typed| Self {
            typed,
            object: PhantomData,
        })
    }

    /// Bare message bytes (a list's item) as a `K` ([`MessageType::decode_generated`]).
    pub fn decode_message(
        &self,
        message: MessageType,
        bytes: &[u8],
        options: DecodeOptions,
    ) -> Result<Arc<K>, Error> {
        downcast((self.typed.message)(message, bytes, options)?)
    }

    /// An enveloped object (a watch event's) as a `K` ([`Envelope::decode_generated`]).
    pub fn decode_envelope(
        &self,
        envelope: &Envelope<'_>,
        options: DecodeOptions,
    ) -> Result<Arc<K>, Error> {
        downcast((self.typed.envelope)(envelope, options)?)
    }
}

fn downcast<K: Send + Sync + 'static>(object: Erased) -> Result<Arc<K>, Error> {
    object
        .downcast::<K>()
        .map_err(|_| Error::Invalid("a generated decoder of another type".into()))
}
