//! A message's bytes read as serde data, by the table's JSON names: the same calls a JSON
//! deserializer makes, so any type that derives `Deserialize` for the JSON form (k8s-openapi's,
//! a user's projection) reads protobuf unchanged. A field the type ignores is skipped without
//! being decoded.

use std::cell::Cell;

use base64::Engine as _;
use serde::de::value::BorrowedStrDeserializer;
use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::forward_to_deserialize_any;
use smallvec::SmallVec;

use crate::Error;
use crate::envelope;
use crate::schema::{Field, INLINE, KEEP_EMPTY, Kind, Message, REPEATED, Special, Value};
use crate::time::{Buf, go_duration, rfc3339};
use crate::wire::{Raw, Reader};

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
struct Nested;

impl Nested {
    #[inline(always)]
    fn enter() -> Result<Self, Error> {
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

/// The fields of a message as a serde map.
#[derive(Debug)]
struct Fields<'de> {
    levels: SmallVec<[Level<'de>; 2]>,
    type_meta: Option<(&'de str, &'de str)>,
    /// The value of the key yielded last.
    pending: Option<ValueDe<'de>>,
    /// The repeated and map fields already yielded.
    done: SmallVec<[&'static Field; 8]>,
}

impl<'de> Fields<'de> {
    #[inline(always)]
    fn new(de: MessageDe<'de>) -> Self {
        let mut levels = SmallVec::new();
        levels.push(Level {
            reader: Reader::new(de.buf),
            message: de.message,
            hint: 0,
        });
        Self {
            levels,
            type_meta: de.type_meta,
            pending: None,
            done: SmallVec::new(),
        }
    }
}

impl<'de> Fields<'de> {
    /// The next key's name, its value in `pending`; `None` at the end. Not generic: one copy of
    /// the wire walk for every target type.
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
                Kind::Map(_) | Kind::Value(_) if field.has(REPEATED) || is_map(field) => {
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
                Kind::Value(value) => match single(message, field, value, raw)? {
                    Some(value) => value,
                    None => continue,
                },
                Kind::Map(_) => unreachable!("maps are taken above"),
            };
            self.pending = Some(value);
            return Ok(Some(field.name));
        }
    }
}

/// The run of occurrences of field `number` that opens `rest`: its bytes, its length, and a
/// reader after it.
fn run_of(rest: &[u8], number: u32) -> Result<(&[u8], usize, Reader<'_>), Error> {
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

#[inline(always)]
fn is_map(field: &Field) -> bool {
    matches!(field.kind, Kind::Map(_))
}

fn wrong_wire(message: &'static Message, field: &'static Field, raw: &Raw<'_>) -> Error {
    Error::WrongWireType {
        message: message.name,
        field: field.name,
        wire_type: raw.wire_type(),
    }
}

/// A singular field's value; `None` for what JSON leaves out: Go's always-written empty string
/// of an `omitempty` field, a zero time.
#[inline(always)]
fn single<'de>(
    message: &'static Message,
    field: &'static Field,
    value: &'static Value,
    raw: Raw<'de>,
) -> Result<Option<ValueDe<'de>>, Error> {
    let value = element(message, field, value, raw)?;
    Ok(match value {
        ValueDe::Str(s) if s.is_empty() && !field.has(KEEP_EMPTY) => None,
        ValueDe::Null => None,
        other => Some(other),
    })
}

/// One value of a field (of a list, a map entry or a singular field), zeros kept.
#[inline(always)]
fn element<'de>(
    message: &'static Message,
    field: &'static Field,
    value: &'static Value,
    raw: Raw<'de>,
) -> Result<ValueDe<'de>, Error> {
    Ok(match (value, raw) {
        (Value::Str, Raw::Bytes(b)) => ValueDe::Str(utf8(b)?),
        (Value::Bytes, Raw::Bytes(b)) => ValueDe::Bytes(b),
        (Value::Bool, Raw::Varint(n)) => ValueDe::Bool(n != 0),
        // int32 is sign-extended to 64 bits on the wire.
        (Value::I32, Raw::Varint(n)) => ValueDe::I64(i64::from(n as i64 as i32)),
        (Value::I64, Raw::Varint(n)) => ValueDe::I64(n as i64),
        (Value::F64, Raw::Fixed64(n)) => ValueDe::F64(f64::from_bits(n)),
        (Value::Msg(index), Raw::Bytes(b)) => message_value(Value::message(*index), b)?,
        (_, raw) => return Err(wrong_wire(message, field, &raw)),
    })
}

#[inline(always)]
pub(crate) fn utf8(bytes: &[u8]) -> Result<&str, Error> {
    std::str::from_utf8(bytes).map_err(|_| Error::Invalid("a string that is not UTF-8".into()))
}

/// A message-typed value: the message, or the JSON form of a special one.
fn message_value<'de>(message: &'static Message, bytes: &'de [u8]) -> Result<ValueDe<'de>, Error> {
    match message.special {
        Special::None => return Ok(ValueDe::Msg(bytes, message)),
        Special::Items | Special::SchemaOrBool | Special::SchemaOrArray => {
            return wrapper_value(message, bytes);
        }
        _ => {}
    }
    let (mut ints, mut text, mut raw) = ([0i64; 3], "", &[][..]);
    let mut reader = Reader::new(bytes);
    while !reader.is_empty() {
        match reader.field()? {
            (n @ 1..=3, Raw::Varint(v)) => ints[n as usize - 1] = v as i64,
            (1, Raw::Bytes(b)) => (text, raw) = (utf8(b).unwrap_or_default(), b),
            (3, Raw::Bytes(b)) => text = utf8(b)?,
            (number @ 1..=3, raw) => {
                return Err(Error::WrongWireType {
                    message: message.name,
                    field: message
                        .fields
                        .get(number as usize - 1)
                        .map_or("", |f| f.name),
                    wire_type: raw.wire_type(),
                });
            }
            (number, _) => {
                return Err(Error::UnknownField {
                    message: message.name,
                    number,
                });
            }
        }
    }
    Ok(match message.special {
        Special::Time | Special::MicroTime if ints[0] == 0 && ints[1] == 0 => ValueDe::Null,
        Special::Time | Special::MicroTime => ValueDe::Time {
            seconds: ints[0],
            nanos: ints[1] as i32,
            micros: message.special == Special::MicroTime,
        },
        Special::Duration => ValueDe::Duration(ints[0]),
        Special::Quantity => ValueDe::Str(utf8(raw)?),
        Special::IntOrString if ints[0] == 1 => ValueDe::Str(text),
        Special::IntOrString => ValueDe::I64(i64::from(ints[1] as i32)),
        Special::RawJson => ValueDe::RawJson(raw),
        Special::None | Special::Items | Special::SchemaOrBool | Special::SchemaOrArray => {
            unreachable!("taken above")
        }
    })
}

/// The JSON form of a wrapper message: `ExtraValue` and `Verbs` are the list of their `items`;
/// `JSONSchemaPropsOrBool` its schema if it has one, else its bool; `JSONSchemaPropsOrArray`
/// and `…OrStringArray` their list if they have one, else their schema.
fn wrapper_value<'de>(message: &'static Message, bytes: &'de [u8]) -> Result<ValueDe<'de>, Error> {
    let field_of = |number: u32| {
        message
            .fields
            .iter()
            .find(|f| f.number == number)
            .ok_or(Error::UnknownField {
                message: message.name,
                number,
            })
    };
    let list = |number: u32| -> Result<Option<ValueDe<'de>>, Error> {
        let mut reader = Reader::new(bytes);
        while !reader.is_empty() {
            let start = reader.rest();
            if reader.field()?.0 == number {
                let (run, count, _) = run_of(start, number)?;
                return Ok(Some(ValueDe::Repeated {
                    run,
                    count,
                    field: field_of(number)?,
                    message,
                }));
            }
        }
        Ok(None)
    };
    let single = |number: u32| -> Result<Option<Raw<'de>>, Error> {
        let mut reader = Reader::new(bytes);
        let mut found = None;
        while !reader.is_empty() {
            let (n, raw) = reader.field()?;
            if n == number {
                found = Some(raw);
            }
        }
        Ok(found)
    };
    Ok(match message.special {
        Special::Items => list(1)?.unwrap_or(ValueDe::Repeated {
            run: &[],
            count: 0,
            field: field_of(1)?,
            message,
        }),
        Special::SchemaOrBool => match (single(2)?, single(1)?) {
            (Some(schema), _) => element(message, field_of(2)?, kind_of(field_of(2)?), schema)?,
            (None, Some(Raw::Varint(allows))) => ValueDe::Bool(allows != 0),
            _ => ValueDe::Bool(false),
        },
        _ => match list(2)? {
            Some(items) => items,
            None => match single(1)? {
                Some(schema) => element(message, field_of(1)?, kind_of(field_of(1)?), schema)?,
                None => ValueDe::Null,
            },
        },
    })
}

fn kind_of(field: &'static Field) -> &'static Value {
    match &field.kind {
        Kind::Value(value) => value,
        Kind::Map(value) => value,
    }
}

/// The value of the key yielded last.
#[inline(always)]
fn take_pending<'de>(pending: &mut Option<ValueDe<'de>>) -> Result<ValueDe<'de>, Error> {
    pending
        .take()
        .ok_or_else(|| Error::Invalid("a value asked for before its key".into()))
}

/// One value, as serde data.
#[derive(Debug, Clone, Copy)]
pub(crate) enum ValueDe<'de> {
    Str(&'de str),
    /// JSON's base64 string.
    Bytes(&'de [u8]),
    Bool(bool),
    I64(i64),
    F64(f64),
    Msg(&'de [u8], &'static Message),
    Time {
        seconds: i64,
        nanos: i32,
        micros: bool,
    },
    Duration(i64),
    RawJson(&'de [u8]),
    /// The run of `count` occurrences of a repeated or map `field`.
    Repeated {
        run: &'de [u8],
        count: usize,
        field: &'static Field,
        message: &'static Message,
    },
    Null,
}

impl<'de> Deserializer<'de> for ValueDe<'de> {
    type Error = Error;

    #[inline(always)]
    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self {
            ValueDe::Str(s) => visitor.visit_borrowed_str(s),
            ValueDe::Bytes(b) => {
                visitor.visit_string(base64::engine::general_purpose::STANDARD.encode(b))
            }
            ValueDe::Bool(b) => visitor.visit_bool(b),
            ValueDe::I64(n) => visitor.visit_i64(n),
            ValueDe::F64(x) => visitor.visit_f64(x),
            ValueDe::Msg(buf, message) => {
                let _nested = Nested::enter()?;
                visitor.visit_map(Fields::new(MessageDe {
                    buf,
                    message,
                    type_meta: None,
                }))
            }
            ValueDe::Time {
                seconds,
                nanos,
                micros,
            } => {
                let mut buf = Buf::default();
                let text = rfc3339(seconds, nanos, micros, &mut buf)
                    .ok_or_else(|| Error::Invalid(format!("a time out of range: {seconds}s")))?;
                visitor.visit_str(text)
            }
            ValueDe::Duration(n) => visitor.visit_string(go_duration(n)),
            ValueDe::RawJson(raw) => raw_json(raw, visitor),
            ValueDe::Repeated {
                run,
                count,
                field,
                message,
            } => match &field.kind {
                Kind::Map(value) => visitor.visit_map(Entries {
                    reader: Reader::new(run),
                    field,
                    message,
                    value,
                    pending: None,
                }),
                Kind::Value(value) => visitor.visit_seq(Elements {
                    reader: Reader::new(run),
                    field,
                    message,
                    value,
                    packed: None,
                    left: count,
                }),
            },
            ValueDe::Null => visitor.visit_unit(),
        }
    }

    #[inline(always)]
    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self {
            ValueDe::Null => visitor.visit_none(),
            ValueDe::RawJson(raw) if !raw.starts_with(envelope::MAGIC) => {
                if raw.is_empty() {
                    return visitor.visit_none();
                }
                json(raw, |de| de.deserialize_option(visitor))
            }
            other => visitor.visit_some(other),
        }
    }

    #[inline(always)]
    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    #[inline(always)]
    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        match self {
            ValueDe::Str(s) => visitor.visit_enum(BorrowedStrDeserializer::new(s)),
            ValueDe::RawJson(raw) if !raw.starts_with(envelope::MAGIC) => {
                json(raw, |de| de.deserialize_enum(name, variants, visitor))
            }
            other => other.deserialize_any(visitor),
        }
    }

    #[inline(always)]
    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_unit()
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf unit
        unit_struct seq tuple tuple_struct map struct identifier
    }
}

/// Raw bytes of a `FieldsV1` or `RawExtension`: JSON, read by serde_json; an enveloped protobuf
/// object (a `RawExtension` holding a built-in object), read as one.
fn raw_json<'de, V: Visitor<'de>>(raw: &'de [u8], visitor: V) -> Result<V::Value, Error> {
    if raw.starts_with(envelope::MAGIC) {
        return envelope::open(raw)?
            .deserializer()?
            .deserialize_any(visitor);
    }
    if raw.is_empty() {
        return visitor.visit_unit();
    }
    json(raw, |de| de.deserialize_any(visitor))
}

fn json<'de, T>(
    raw: &'de [u8],
    f: impl FnOnce(
        &mut serde_json::Deserializer<serde_json::de::SliceRead<'de>>,
    ) -> serde_json::Result<T>,
) -> Result<T, Error> {
    let mut de = serde_json::Deserializer::from_slice(raw);
    let value = f(&mut de).map_err(|e| Error::Json(e.to_string()))?;
    de.end().map_err(|e| Error::Json(e.to_string()))?;
    Ok(value)
}

/// The values of a repeated field.
#[derive(Debug)]
struct Elements<'de> {
    reader: Reader<'de>,
    field: &'static Field,
    message: &'static Message,
    value: &'static Value,
    /// A packed run of scalars being read.
    packed: Option<Reader<'de>>,
    /// Occurrences left in the run (the size hint, so that a list is allocated once).
    left: usize,
}

impl<'de> SeqAccess<'de> for Elements<'de> {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Error> {
        loop {
            if let Some(packed) = self.packed.as_mut() {
                if !packed.is_empty() {
                    let n = packed.varint()?;
                    let value = element(self.message, self.field, self.value, Raw::Varint(n))?;
                    return seed.deserialize(value).map(Some);
                }
                self.packed = None;
            }
            if self.reader.is_empty() {
                return Ok(None);
            }
            let (_, raw) = self.reader.field()?;
            if let (Value::Bool | Value::I32 | Value::I64, Raw::Bytes(run)) = (self.value, raw) {
                self.packed = Some(Reader::new(run));
                continue;
            }
            self.left = self.left.saturating_sub(1);
            let value = element(self.message, self.field, self.value, raw)?;
            return seed.deserialize(value).map(Some);
        }
    }

    fn size_hint(&self) -> Option<usize> {
        (self.packed.is_none()).then_some(self.left)
    }
}

/// The entries of a map field: messages of `{1: key, 2: value}`.
#[derive(Debug)]
struct Entries<'de> {
    reader: Reader<'de>,
    field: &'static Field,
    message: &'static Message,
    value: &'static Value,
    pending: Option<ValueDe<'de>>,
}

impl<'de> Entries<'de> {
    /// The next entry's key and value; `None` at the end.
    #[inline(always)]
    fn entry(&mut self) -> Result<Option<(&'de str, ValueDe<'de>)>, Error> {
        if self.reader.is_empty() {
            return Ok(None);
        }
        let (_, raw) = self.reader.field()?;
        let Raw::Bytes(entry) = raw else {
            return Err(wrong_wire(self.message, self.field, &raw));
        };
        let (mut key, mut value) = ("", None);
        let mut reader = Reader::new(entry);
        while !reader.is_empty() {
            match reader.field()? {
                (1, Raw::Bytes(b)) => key = utf8(b)?,
                (2, raw) => value = Some(element(self.message, self.field, self.value, raw)?),
                (_, raw) => return Err(wrong_wire(self.message, self.field, &raw)),
            }
        }
        let value = match value {
            Some(value) => value,
            // A zero value is left out of its entry.
            None => element(self.message, self.field, self.value, zero(self.value))?,
        };
        Ok(Some((key, value)))
    }
}

impl<'de> MapAccess<'de> for Entries<'de> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        let Some((key, value)) = self.entry()? else {
            return Ok(None);
        };
        self.pending = Some(value);
        seed.deserialize(BorrowedStrDeserializer::new(key))
            .map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        seed.deserialize(take_pending(&mut self.pending)?)
    }

    /// Both at once, the value never stored (the maps of `std` read their entries so).
    fn next_entry_seed<K: DeserializeSeed<'de>, V: DeserializeSeed<'de>>(
        &mut self,
        kseed: K,
        vseed: V,
    ) -> Result<Option<(K::Value, V::Value)>, Error> {
        let Some((key, value)) = self.entry()? else {
            return Ok(None);
        };
        let key = kseed.deserialize(BorrowedStrDeserializer::new(key))?;
        Ok(Some((key, vseed.deserialize(value)?)))
    }
}

/// The wire form of a type's zero value.
fn zero(value: &Value) -> Raw<'static> {
    match value {
        Value::Bool | Value::I32 | Value::I64 => Raw::Varint(0),
        Value::F64 => Raw::Fixed64(0),
        Value::Str | Value::Bytes | Value::Msg(_) => Raw::Bytes(&[]),
    }
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
