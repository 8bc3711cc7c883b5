//! The kinds of field values the generated decoders write: one trait, [`Decode`], implemented
//! for every type a k8s-openapi field holds, so that the generated code only names the field
//! (`opt(&mut self.spec, v)`) and the field's type picks how its value is read.
//!
//! Each kind reads the value the serde path would hand the type's `Deserialize` (a
//! [`ValueDe`]) and makes what that `Deserialize` would make of it. A value of a shape a kind
//! does not expect goes to the type's own `Deserialize`, so that the result, and the error, is
//! the serde path's in every case.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use serde::Deserialize;
use serde::de::DeserializeOwned;

use super::{Level, Merge};
use crate::Error;
use crate::de::repeated::{Elements, Entries};
use crate::de::{ValueDe, element, kind_of, single, utf8};
use crate::schema::{Field, KEEP_EMPTY, Kind, Message, Special, Value};
use crate::wire::{Raw, Reader};

/// A type a k8s-openapi field holds, read from the value the serde path would hand its
/// `Deserialize`. Every method defaults to that `Deserialize`.
pub(crate) trait Decode: DeserializeOwned {
    /// A singular field of `message` into an `Option<Self>`, from its value as the wire holds
    /// it: through the value the serde path would read ([`single`]), unless the type reads
    /// its usual wire form straight ([`Fast`]), to the same result.
    #[inline(always)]
    fn decode_field(
        slot: &mut Option<Self>,
        message: &'static Message,
        field: &'static Field,
        raw: Raw<'_>,
    ) -> Result<(), Error> {
        match Self::fast(field, raw)? {
            Fast::Value(value) => *slot = Some(value),
            Fast::Left => {}
            Fast::General => general_option(slot, message, field, raw)?,
        }
        Ok(())
    }

    /// [`decode_field`](Self::decode_field) into a required field.
    #[inline(always)]
    fn decode_field_required(
        slot: &mut Self,
        message: &'static Message,
        field: &'static Field,
        raw: Raw<'_>,
    ) -> Result<(), Error>
    where
        Self: Default,
    {
        match Self::fast(field, raw)? {
            Fast::Value(value) => *slot = value,
            Fast::Left => {}
            Fast::General => general_required(slot, message, field, raw)?,
        }
        Ok(())
    }

    /// The value of a singular field whose wire form this type reads straight: a string, a
    /// number, a bool. [`Fast::General`] for any other.
    #[inline(always)]
    fn fast(_field: &'static Field, _raw: Raw<'_>) -> Result<Fast<Self>, Error> {
        Ok(Fast::General)
    }

    /// The value.
    fn decode(v: ValueDe<'_>) -> Result<Self, Error> {
        Self::deserialize(v)
    }

    /// An `Option<Self>` field's value, as serde reads an `Option`: a zero time or an empty
    /// raw value is `None`.
    fn decode_option(slot: &mut Option<Self>, v: ValueDe<'_>) -> Result<(), Error> {
        *slot = match v {
            ValueDe::Null => None,
            ValueDe::RawJson(_) => Option::<Self>::deserialize(v)?,
            v => Some(Self::decode(v)?),
        };
        Ok(())
    }

    /// A required field's value: k8s-openapi reads it as an `Option` and takes the default for
    /// `None`.
    fn decode_required(slot: &mut Self, v: ValueDe<'_>) -> Result<(), Error>
    where
        Self: Default,
    {
        let mut value = None;
        Self::decode_option(&mut value, v)?;
        *slot = value.unwrap_or_default();
        Ok(())
    }

    /// The value, over `slot` (a message: read in place).
    fn decode_into(slot: &mut Self, v: ValueDe<'_>) -> Result<(), Error> {
        *slot = Self::decode(v)?;
        Ok(())
    }

    /// One element of a list, appended to it.
    fn push_element(list: &mut Vec<Self>, v: ValueDe<'_>) -> Result<(), Error> {
        list.push(Self::decode(v)?);
        Ok(())
    }

    /// One element of a list of values (not packed scalars) from its wire form, appended to
    /// it: through the value the serde path would read, unless the type reads its usual wire
    /// form straight, to the same result.
    #[inline(always)]
    fn push_raw(
        list: &mut Vec<Self>,
        message: &'static Message,
        field: &'static Field,
        value: &'static Value,
        raw: Raw<'_>,
    ) -> Result<(), Error> {
        Self::push_element(list, element(message, field, value, raw)?)
    }
}

/// What [`Decode::fast`] made of a singular field.
pub(crate) enum Fast<T> {
    /// Its value.
    Value(T),
    /// A value JSON leaves out (an empty string): the field is left as it is.
    Left,
    /// Not a wire form read straight: the general path reads it.
    General,
}

/// `Decode` for a type that keeps serde's decoding (its `Deserialize` over the table-driven
/// deserializer): raw JSON, the apiextensions wrappers, the types that refuse a missing field.
macro_rules! serde_fallback {
    ($t:ty) => {
        impl $crate::typed::kinds::Decode for $t {}
    };
}
pub(crate) use serde_fallback;

/// `Decode` for a generated message type: merged in place, into a default value already in
/// its slot.
macro_rules! message {
    ($t:ty) => {
        impl $crate::typed::kinds::Decode for $t {
            #[inline]
            fn decode(v: $crate::de::ValueDe<'_>) -> Result<Self, $crate::Error> {
                let mut object = Self::default();
                $crate::typed::kinds::message_into(&mut object, v)?;
                Ok(object)
            }

            #[inline]
            fn decode_into(
                slot: &mut Self,
                v: $crate::de::ValueDe<'_>,
            ) -> Result<(), $crate::Error> {
                $crate::typed::kinds::message_into(slot, v)
            }

            #[inline]
            fn decode_option(
                slot: &mut Option<Self>,
                v: $crate::de::ValueDe<'_>,
            ) -> Result<(), $crate::Error> {
                $crate::typed::kinds::message_option(slot, v)
            }

            #[inline]
            fn decode_required(
                slot: &mut Self,
                v: $crate::de::ValueDe<'_>,
            ) -> Result<(), $crate::Error> {
                $crate::typed::kinds::message_required(slot, v)
            }

            #[inline]
            fn push_element(
                list: &mut Vec<Self>,
                v: $crate::de::ValueDe<'_>,
            ) -> Result<(), $crate::Error> {
                $crate::typed::kinds::message_element(list, v)
            }

            #[inline(always)]
            fn decode_field(
                slot: &mut Option<Self>,
                message: &'static $crate::schema::Message,
                field: &'static $crate::schema::Field,
                raw: $crate::wire::Raw<'_>,
            ) -> Result<(), $crate::Error> {
                match $crate::typed::kinds::own_bytes::<Self>(field, raw) {
                    Some(bytes) => {
                        $crate::typed::kinds::merge_nested(slot.insert(Self::default()), bytes)
                    }
                    None => $crate::typed::kinds::general_option(slot, message, field, raw),
                }
            }

            #[inline(always)]
            fn decode_field_required(
                slot: &mut Self,
                message: &'static $crate::schema::Message,
                field: &'static $crate::schema::Field,
                raw: $crate::wire::Raw<'_>,
            ) -> Result<(), $crate::Error> {
                match $crate::typed::kinds::own_bytes::<Self>(field, raw) {
                    Some(bytes) => {
                        *slot = Self::default();
                        $crate::typed::kinds::merge_nested(slot, bytes)
                    }
                    None => $crate::typed::kinds::general_required(slot, message, field, raw),
                }
            }

            #[inline(always)]
            fn push_raw(
                list: &mut Vec<Self>,
                message: &'static $crate::schema::Message,
                field: &'static $crate::schema::Field,
                value: &'static $crate::schema::Value,
                raw: $crate::wire::Raw<'_>,
            ) -> Result<(), $crate::Error> {
                match $crate::typed::kinds::own_element::<Self>(value, raw) {
                    Some(bytes) => {
                        let at = list.len();
                        list.push(Self::default());
                        $crate::typed::kinds::merge_nested(&mut list[at], bytes)
                    }
                    None => {
                        Self::push_element(list, $crate::de::element(message, field, value, raw)?)
                    }
                }
            }
        }
    };
}
pub(crate) use message;

/// The bytes of a singular field that holds a message of `T`'s own type (not one of the
/// special messages whose JSON form is not an object): what the serde path would read as that
/// message, and [`message_option`] merge in place.
#[inline(always)]
pub(crate) fn own_bytes<'de, T: Merge>(field: &'static Field, raw: Raw<'de>) -> Option<&'de [u8]> {
    match &field.kind {
        Kind::Value(value) => own_element::<T>(value, raw),
        Kind::Map(_) => None,
    }
}

/// The bytes of a list element that is a message of `T`'s own type (not a special one).
#[inline(always)]
pub(crate) fn own_element<'de, T: Merge>(
    value: &'static Value,
    raw: Raw<'de>,
) -> Option<&'de [u8]> {
    match (value, raw) {
        (Value::Msg(index), Raw::Bytes(bytes))
            if *index == T::MESSAGE && Value::message(*index).special == Special::None =>
        {
            Some(bytes)
        }
        _ => None,
    }
}

/// A singular field into an `Option`, through the value the serde path reads.
#[inline(never)]
pub(crate) fn general_option<T: Decode>(
    slot: &mut Option<T>,
    message: &'static Message,
    field: &'static Field,
    raw: Raw<'_>,
) -> Result<(), Error> {
    match single(message, field, kind_of(field), raw)? {
        Some(v) => T::decode_option(slot, v),
        None => Ok(()),
    }
}

/// A singular field into a required field, through the value the serde path reads.
#[inline(never)]
pub(crate) fn general_required<T: Decode + Default>(
    slot: &mut T,
    message: &'static Message,
    field: &'static Field,
    raw: Raw<'_>,
) -> Result<(), Error> {
    match single(message, field, kind_of(field), raw)? {
        Some(v) => T::decode_required(slot, v),
        None => Ok(()),
    }
}

/// The bytes of a message of `T`'s type, if `v` is one.
#[inline(always)]
pub(crate) fn own_message<'de, T: Merge>(v: &ValueDe<'de>) -> Option<&'de [u8]> {
    match v {
        ValueDe::Msg(bytes, message) if message.index() == T::MESSAGE => Some(bytes),
        _ => None,
    }
}

/// The stack a nested message needs left on the thread before it is read there; with less, it
/// is read on a new segment of [`STACK_SEGMENT`] bytes. A message of the deepest allowed chain
/// (`MAX_DEPTH` levels of `JSONSchemaProps`) costs tens of kilobytes a level in a debug build.
const STACK_RED_ZONE: usize = 128 * 1024;

/// The size of a stack segment that a nested message grows onto.
const STACK_SEGMENT: usize = 2 * 1024 * 1024;

/// A message read into the default value it replaces, one level of nesting deeper (on a new
/// stack segment if the thread's stack runs low: the levels are bounded, their frames are not
/// small).
#[inline(always)]
pub(crate) fn merge_nested<T: Merge>(target: &mut T, bytes: &[u8]) -> Result<(), Error> {
    let _nested = crate::de::Nested::enter()?;
    stacker::maybe_grow(STACK_RED_ZONE, STACK_SEGMENT, || {
        target.merge(bytes, &mut Level::default())
    })
}

#[inline]
pub(crate) fn message_option<T: Merge + DeserializeOwned>(
    slot: &mut Option<T>,
    v: ValueDe<'_>,
) -> Result<(), Error> {
    match own_message::<T>(&v) {
        Some(bytes) => merge_nested(slot.insert(T::default()), bytes),
        None => {
            *slot = Option::<T>::deserialize(v)?;
            Ok(())
        }
    }
}

/// A message over `slot`: read in place if it is of `T`'s own type, else by `otherwise` (serde).
#[inline(always)]
fn message_over<'de, T: Merge>(
    slot: &mut T,
    v: ValueDe<'de>,
    otherwise: impl FnOnce(ValueDe<'de>) -> Result<T, Error>,
) -> Result<(), Error> {
    match own_message::<T>(&v) {
        Some(bytes) => {
            *slot = T::default();
            merge_nested(slot, bytes)
        }
        None => {
            *slot = otherwise(v)?;
            Ok(())
        }
    }
}

#[inline]
pub(crate) fn message_into<T: Merge + DeserializeOwned>(
    slot: &mut T,
    v: ValueDe<'_>,
) -> Result<(), Error> {
    message_over(slot, v, T::deserialize)
}

#[inline]
pub(crate) fn message_required<T: Merge + DeserializeOwned>(
    slot: &mut T,
    v: ValueDe<'_>,
) -> Result<(), Error> {
    message_over(slot, v, |v| {
        Ok(Option::<T>::deserialize(v)?.unwrap_or_default())
    })
}

#[inline]
pub(crate) fn message_element<T: Merge + DeserializeOwned>(
    list: &mut Vec<T>,
    v: ValueDe<'_>,
) -> Result<(), Error> {
    match own_message::<T>(&v) {
        Some(bytes) => {
            let at = list.len();
            list.push(T::default());
            merge_nested(&mut list[at], bytes)
        }
        None => {
            list.push(T::deserialize(v)?);
            Ok(())
        }
    }
}

impl Decode for String {
    #[inline(always)]
    fn push_raw(
        list: &mut Vec<Self>,
        message: &'static Message,
        field: &'static Field,
        value: &'static Value,
        raw: Raw<'_>,
    ) -> Result<(), Error> {
        match (value, raw) {
            // A list keeps its empty strings.
            (Value::Str, Raw::Bytes(bytes)) => {
                list.push(utf8(bytes)?.to_owned());
                Ok(())
            }
            _ => Self::push_element(list, element(message, field, value, raw)?),
        }
    }

    #[inline(always)]
    fn fast(field: &'static Field, raw: Raw<'_>) -> Result<Fast<Self>, Error> {
        Ok(match (&field.kind, raw) {
            (Kind::Value(Value::Str), Raw::Bytes(bytes)) => {
                let text = utf8(bytes)?;
                if text.is_empty() && !field.has(KEEP_EMPTY) {
                    Fast::Left
                } else {
                    Fast::Value(text.to_owned())
                }
            }
            _ => Fast::General,
        })
    }

    #[inline]
    fn decode(v: ValueDe<'_>) -> Result<Self, Error> {
        match v {
            ValueDe::Str(s) => Ok(s.to_owned()),
            v => Self::deserialize(v),
        }
    }
}

impl Decode for bool {
    #[inline(always)]
    fn fast(field: &'static Field, raw: Raw<'_>) -> Result<Fast<Self>, Error> {
        Ok(match (&field.kind, raw) {
            (Kind::Value(Value::Bool), Raw::Varint(n)) => Fast::Value(n != 0),
            _ => Fast::General,
        })
    }

    #[inline]
    fn decode(v: ValueDe<'_>) -> Result<Self, Error> {
        match v {
            ValueDe::Bool(b) => Ok(b),
            v => Self::deserialize(v),
        }
    }
}

impl Decode for i32 {
    #[inline(always)]
    fn fast(field: &'static Field, raw: Raw<'_>) -> Result<Fast<Self>, Error> {
        Ok(match (&field.kind, raw) {
            // int32 is sign-extended to 64 bits on the wire: its low half is the value.
            (Kind::Value(Value::I32), Raw::Varint(n)) => Fast::Value(n as i64 as i32),
            _ => Fast::General,
        })
    }

    #[inline]
    fn decode(v: ValueDe<'_>) -> Result<Self, Error> {
        match v {
            ValueDe::I64(n) if i32::try_from(n).is_ok() => Ok(n as i32),
            v => Self::deserialize(v),
        }
    }
}

impl Decode for i64 {
    #[inline(always)]
    fn fast(field: &'static Field, raw: Raw<'_>) -> Result<Fast<Self>, Error> {
        Ok(match (&field.kind, raw) {
            (Kind::Value(Value::I64), Raw::Varint(n)) => Fast::Value(n as i64),
            _ => Fast::General,
        })
    }

    #[inline]
    fn decode(v: ValueDe<'_>) -> Result<Self, Error> {
        match v {
            ValueDe::I64(n) => Ok(n),
            v => Self::deserialize(v),
        }
    }
}

impl Decode for f64 {
    #[inline]
    fn decode(v: ValueDe<'_>) -> Result<Self, Error> {
        match v {
            ValueDe::F64(x) => Ok(x),
            v => Self::deserialize(v),
        }
    }
}

impl Decode for Quantity {
    #[inline]
    fn decode(v: ValueDe<'_>) -> Result<Self, Error> {
        match v {
            ValueDe::Str(s) => Ok(Quantity(s.to_owned())),
            v => Self::deserialize(v),
        }
    }
}

impl Decode for IntOrString {
    #[inline]
    fn decode(v: ValueDe<'_>) -> Result<Self, Error> {
        match v {
            ValueDe::Str(s) => Ok(IntOrString::String(s.to_owned())),
            ValueDe::I64(n) if i32::try_from(n).is_ok() => Ok(IntOrString::Int(n as i32)),
            v => Self::deserialize(v),
        }
    }
}

impl Decode for ByteString {
    #[inline]
    fn decode(v: ValueDe<'_>) -> Result<Self, Error> {
        match v {
            // The serde path writes the bytes as base64, which `ByteString` decodes again.
            ValueDe::Bytes(b) => Ok(ByteString(b.to_vec())),
            v => Self::deserialize(v),
        }
    }
}

/// The first and last second that RFC 3339 can write (years 0 to 9999): the serde path writes
/// a time as that text, which a time outside refuses.
const FIRST_SECOND: i64 = -62_167_219_200;
const LAST_SECOND: i64 = 253_402_300_799;

/// A `Time` or `MicroTime` from its seconds and nanoseconds: the instant the serde path's RFC
/// 3339 text (to the second, or with `micros` to the microsecond) parses as, without the text.
#[inline]
fn timestamp(seconds: i64, nanos: i32, micros: bool) -> Result<Timestamp, Error> {
    if !(FIRST_SECOND..=LAST_SECOND).contains(&seconds) {
        return Err(Error::Invalid(format!("a time out of range: {seconds}s")));
    }
    let nanos = if micros {
        nanos.clamp(0, 999_999_999) / 1000 * 1000
    } else {
        0
    };
    Timestamp::new(seconds, nanos).map_err(|e| Error::Custom(e.to_string()))
}

impl Decode for Time {
    #[inline]
    fn decode(v: ValueDe<'_>) -> Result<Self, Error> {
        match v {
            ValueDe::Time {
                seconds,
                nanos,
                micros,
            } => timestamp(seconds, nanos, micros).map(Time),
            v => Self::deserialize(v),
        }
    }
}

impl Decode for MicroTime {
    #[inline]
    fn decode(v: ValueDe<'_>) -> Result<Self, Error> {
        match v {
            ValueDe::Time {
                seconds,
                nanos,
                micros,
            } => timestamp(seconds, nanos, micros).map(MicroTime),
            v => Self::deserialize(v),
        }
    }
}

impl<T: Decode + Default> Decode for Box<T> {
    /// Read in its box: a `JSONSchemaProps` (kilobytes) is never on the stack, however deep
    /// its `not`s nest.
    #[inline]
    fn decode(v: ValueDe<'_>) -> Result<Self, Error> {
        let mut boxed = Box::<T>::default();
        T::decode_into(&mut boxed, v)?;
        Ok(boxed)
    }
}

impl<T: Decode> Decode for Vec<T> {
    #[inline]
    fn decode(v: ValueDe<'_>) -> Result<Self, Error> {
        let ValueDe::Repeated {
            run,
            count,
            field,
            message,
        } = v
        else {
            return Self::deserialize(v);
        };
        let Kind::Value(value) = &field.kind else {
            return Self::deserialize(v);
        };
        let mut list = Vec::with_capacity(count);
        if let Value::Bool | Value::I32 | Value::I64 = value {
            // Scalars may come packed: the serde path's walk reads both forms.
            let mut elements = Elements {
                reader: Reader::new(run),
                field,
                message,
                value,
                packed: None,
                left: count,
            };
            while let Some(v) = elements.next_value()? {
                T::push_element(&mut list, v)?;
            }
        } else {
            // As that walk reads a run of other values: one element per occurrence.
            let mut reader = Reader::new(run);
            while !reader.is_empty() {
                let (_, raw) = reader.field()?;
                T::push_raw(&mut list, message, field, value, raw)?;
            }
        }
        Ok(list)
    }
}

impl<T: Decode> Decode for BTreeMap<String, T> {
    #[inline]
    fn decode(v: ValueDe<'_>) -> Result<Self, Error> {
        let ValueDe::Repeated {
            run,
            field,
            message,
            ..
        } = v
        else {
            return Self::deserialize(v);
        };
        let Kind::Map(value) = &field.kind else {
            return Self::deserialize(v);
        };
        let mut entries = Entries {
            reader: Reader::new(run),
            field,
            message,
            value,
            pending: None,
        };
        let mut map = BTreeMap::new();
        while let Some((key, v)) = entries.entry()? {
            let value = T::decode(v)?;
            map.insert(key.to_owned(), value);
        }
        Ok(map)
    }
}

serde_fallback!(k8s_openapi::serde_json::Value);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::{Buf, rfc3339};

    #[test]
    fn the_range_of_times_is_the_range_rfc_3339_writes() {
        let mut buf = Buf::default();
        for (seconds, writes) in [
            (FIRST_SECOND, true),
            (FIRST_SECOND - 1, false),
            (LAST_SECOND, true),
            (LAST_SECOND + 1, false),
        ] {
            assert_eq!(
                rfc3339(seconds, 0, false, &mut buf).is_some(),
                writes,
                "{seconds}"
            );
        }
        // Inside it, a time is the instant its text parses as.
        let text = rfc3339(1_704_164_645, 123_456_789, true, &mut buf)
            .unwrap()
            .to_owned();
        let parsed: Timestamp = text.parse().unwrap();
        assert_eq!(timestamp(1_704_164_645, 123_456_789, true).unwrap(), parsed);
        assert_eq!(
            timestamp(1_704_164_645, 123_456_789, false).unwrap(),
            Timestamp::from_second(1_704_164_645).unwrap()
        );
    }
}
