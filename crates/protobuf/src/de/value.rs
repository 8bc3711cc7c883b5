//! Values as serde data: a field's wire value given its schema type, the JSON form of the
//! special messages (times, durations, quantities, raw JSON), and [`ValueDe`], the deserializer
//! of one value.

use base64::Engine as _;
use serde::de::value::BorrowedStrDeserializer;
use serde::de::{Deserializer, Visitor};
use serde::forward_to_deserialize_any;

use crate::Error;
use crate::envelope;
use crate::schema::{Field, KEEP_EMPTY, Kind, Message, Special, Value};
use crate::time::{Buf, go_duration, rfc3339};
use crate::wire::{Raw, Reader};

use super::repeated::{Elements, Entries};
use super::{Fields, MessageDe, Nested, run_of, wrong_wire};

/// A singular field's value; `None` for what JSON leaves out: Go's always-written empty string
/// of an `omitempty` field, a zero time.
#[inline(always)]
pub(crate) fn single<'de>(
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
pub(crate) fn element<'de>(
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

/// A field's value type (a map's: its values').
#[inline(always)]
pub(crate) fn kind_of(field: &'static Field) -> &'static Value {
    match &field.kind {
        Kind::Value(value) => value,
        Kind::Map(value) => value,
    }
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
