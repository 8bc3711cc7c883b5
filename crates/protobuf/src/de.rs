//! A message's bytes read as serde data, by the table's JSON names: the same calls a JSON
//! deserializer makes, so any type that derives `Deserialize` for the JSON form (k8s-openapi's,
//! a user's projection) reads protobuf unchanged. A field the type ignores is skipped without
//! being decoded.

use std::cell::Cell;

use serde::de::value::BorrowedStrDeserializer;
use serde::de::{DeserializeSeed, Deserializer, MapAccess, Visitor};
use serde::forward_to_deserialize_any;
use smallvec::SmallVec;

use crate::Error;
use crate::schema::{Field, INLINE, Kind, Message, REPEATED, Value};
use crate::wire::{Raw, Reader};

pub(crate) mod repeated;
mod value;

pub(crate) use self::value::{ValueDe, element, kind_of, single, utf8};

/// How deep messages may nest: each message inside another, and each object enveloped in a
/// `RawExtension`, is a level (serde_json's limit for JSON is as many). Every level is a few
/// frames of stack: deeper input (a `JSONSchemaProps` chain of `not`s is 5 bytes a level) is
/// refused rather than read until the stack overflows.
pub(crate) const MAX_DEPTH: usize = 128;

thread_local! {
    /// The levels of messages being read on this thread.
    static DEPTH: Cell<usize> = const { Cell::new(0) };
}

/// One level of nesting, held while a message is read.
#[derive(Debug)]
pub(crate) struct Nested;

impl Nested {
    #[inline(always)]
    pub(crate) fn enter() -> Result<Self, Error> {
        DEPTH.with(|depth| {
            if depth.get() >= MAX_DEPTH {
                return Err(Error::Invalid(format!(
                    "messages nested more than {MAX_DEPTH} deep"
                )));
            }
            depth.set(depth.get() + 1);
            Ok(Nested)
        })
    }
}

impl Drop for Nested {
    #[inline(always)]
    fn drop(&mut self) {
        DEPTH.with(|depth| depth.set(depth.get() - 1));
    }
}

/// A message read as a map of its fields' JSON names.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MessageDe<'de> {
    pub(crate) buf: &'de [u8],
    pub(crate) message: &'static Message,
    /// `apiVersion` and `kind`, yielded first: an enveloped object's `typeMeta`.
    pub(crate) type_meta: Option<(&'de str, &'de str)>,
}

impl<'de> Deserializer<'de> for MessageDe<'de> {
    type Error = Error;

    #[inline(always)]
    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        let _nested = Nested::enter()?;
        visitor.visit_map(Fields::new(self))
    }

    #[inline(always)]
    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_some(self)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_unit()
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf unit
        unit_struct seq tuple tuple_struct map struct enum identifier
    }
}

/// One level of fields being read: the message's own, or an inlined struct's.
#[derive(Debug)]
struct Level<'de> {
    reader: Reader<'de>,
    message: &'static Message,
    hint: usize,
}

/// The walk through a message's fields: each field's value as the table types it, Go's embedded
/// structs entered as levels of their own, the run of a repeated field taken whole. Not
/// generic: one copy of the wire walk for every target type.
#[derive(Debug)]
pub(crate) struct Walk<'de> {
    levels: SmallVec<[Level<'de>; 2]>,
    /// The repeated and map fields already yielded.
    done: SmallVec<[&'static Field; 8]>,
}

impl<'de> Walk<'de> {
    #[inline(always)]
    pub(crate) fn new(buf: &'de [u8], message: &'static Message) -> Self {
        let mut levels = SmallVec::new();
        levels.push(Level {
            reader: Reader::new(buf),
            message,
            hint: 0,
        });
        Self {
            levels,
            done: SmallVec::new(),
        }
    }

    /// The next field and its value; `None` at the end.
    #[inline]
    pub(crate) fn next(&mut self) -> Result<Option<(&'static Field, ValueDe<'de>)>, Error> {
        loop {
            let Some(level) = self.levels.last_mut() else {
                return Ok(None);
            };
            if level.reader.is_empty() {
                self.levels.pop();
                continue;
            }
            let start = level.reader.rest();
            let (number, raw) = level.reader.field()?;
            let message = level.message;
            let field = message
                .field(number, &mut level.hint)
                .ok_or(Error::UnknownField {
                    message: message.name,
                    number,
                })?;
            let value = match &field.kind {
                Kind::Value(Value::Msg(index)) if field.has(INLINE) => {
                    let Raw::Bytes(bytes) = raw else {
                        return Err(wrong_wire(message, field, &raw));
                    };
                    self.levels.push(Level {
                        reader: Reader::new(bytes),
                        message: Value::message(*index),
                        hint: 0,
                    });
                    continue;
                }
                Kind::Value(value) if !field.has(REPEATED) => {
                    match single(message, field, value, raw)? {
                        Some(value) => value,
                        None => continue,
                    }
                }
                _ => {
                    // Encoders write a repeated field's occurrences in one run (Go's do); one
                    // split into several runs is refused rather than read twice.
                    if self.done.iter().any(|f| std::ptr::eq(*f, field)) {
                        return Err(Error::Invalid(format!(
                            "field {} of {} in more than one run",
                            field.name, message.name
                        )));
                    }
                    self.done.push(field);
                    let (run, count, after) = run_of(start, number)?;
                    level.reader = after;
                    ValueDe::Repeated {
                        run,
                        count,
                        field,
                        message,
                    }
                }
            };
            return Ok(Some((field, value)));
        }
    }
}

/// The fields of a message as a serde map.
#[derive(Debug)]
struct Fields<'de> {
    walk: Walk<'de>,
    type_meta: Option<(&'de str, &'de str)>,
    /// The value of the key yielded last.
    pending: Option<ValueDe<'de>>,
}

impl<'de> Fields<'de> {
    #[inline(always)]
    fn new(de: MessageDe<'de>) -> Self {
        Self {
            walk: Walk::new(de.buf, de.message),
            type_meta: de.type_meta,
            pending: None,
        }
    }

    /// The next key's name, its value in `pending`; `None` at the end.
    fn next_field(&mut self) -> Result<Option<&'static str>, Error> {
        if let Some((api_version, kind)) = self.type_meta {
            if !api_version.is_empty() {
                self.type_meta = Some(("", kind));
                self.pending = Some(ValueDe::Str(api_version));
                return Ok(Some("apiVersion"));
            }
            self.type_meta = None;
            if !kind.is_empty() {
                self.pending = Some(ValueDe::Str(kind));
                return Ok(Some("kind"));
            }
        }
        Ok(self.walk.next()?.map(|(field, value)| {
            self.pending = Some(value);
            field.name
        }))
    }
}

/// The run of occurrences of field `number` that opens `rest`: its bytes, its length, and a
/// reader after it.
pub(crate) fn run_of(rest: &[u8], number: u32) -> Result<(&[u8], usize, Reader<'_>), Error> {
    let mut reader = Reader::new(rest);
    let mut count = 0;
    while !reader.is_empty() {
        let before = reader;
        if reader.field()?.0 != number {
            reader = before;
            break;
        }
        count += 1;
    }
    let run = &rest[..rest.len() - reader.rest().len()];
    Ok((run, count, reader))
}

impl<'de> MapAccess<'de> for Fields<'de> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        match self.next_field()? {
            Some(name) => seed
                .deserialize(BorrowedStrDeserializer::new(name))
                .map(Some),
            None => Ok(None),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        seed.deserialize(take_pending(&mut self.pending)?)
    }
}

pub(crate) fn wrong_wire(message: &'static Message, field: &'static Field, raw: &Raw<'_>) -> Error {
    Error::WrongWireType {
        message: message.name,
        field: field.name,
        wire_type: raw.wire_type(),
    }
}

/// The value of the key yielded last.
#[inline(always)]
fn take_pending<'de>(pending: &mut Option<ValueDe<'de>>) -> Result<ValueDe<'de>, Error> {
    pending
        .take()
        .ok_or_else(|| Error::Invalid("a value asked for before its key".into()))
}

/// A message of the table read as `T`.
pub(crate) fn from_message<'de, T: serde::Deserialize<'de>>(
    buf: &'de [u8],
    message: &'static Message,
    type_meta: Option<(&'de str, &'de str)>,
) -> Result<T, Error> {
    T::deserialize(MessageDe {
        buf,
        message,
        type_meta,
    })
}
