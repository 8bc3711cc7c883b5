//! The field a generated decoder has just read ([`At`]), and how each arm of its `match` writes
//! it: a singular value into an `Option` or a required field, a repeated field's run or a map,
//! an embedded struct's bytes, and a field the type does not have. Each reads the value exactly
//! as the serde path's walk does (the same wire checks, the same run rule, the same values left
//! out), by the table's entry for the field; the arm's message and field index are constants, so
//! that entry is known where the arm is compiled.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta};

use super::kinds::{Decode, own_message};
use super::{Level, Merge};
use crate::Error;
use crate::de::{ValueDe, Walk, kind_of, run_of, single, wrong_wire};
use crate::schema::{Field, INLINE, Kind, Message, REPEATED, Value};
use crate::wire::{Raw, Reader};

/// A field just read off a message: its number, its value as the wire holds it, and the bytes
/// from its key on (where the run of a repeated field starts).
#[derive(Debug, Clone, Copy)]
pub(crate) struct At<'de> {
    pub(crate) number: u32,
    raw: Raw<'de>,
    start: &'de [u8],
}

/// Field `index` of message `msg`.
#[inline(always)]
fn entry(msg: u16, index: usize) -> (&'static Message, &'static Field) {
    let message = Value::message(msg);
    (message, &message.fields[index])
}

impl<'de> At<'de> {
    /// The next field of `r`.
    #[inline(always)]
    pub(crate) fn read(r: &mut Reader<'de>) -> Result<Self, Error> {
        let start = r.rest();
        let (number, raw) = r.field()?;
        Ok(Self { number, raw, start })
    }

    /// A singular field's value; `None` for what JSON leaves out (an empty string, a zero
    /// time), which leaves the field as it is.
    #[inline(always)]
    fn single(self, msg: u16, index: usize) -> Result<Option<ValueDe<'de>>, Error> {
        let (message, field) = entry(msg, index);
        single(message, field, kind_of(field), self.raw)
    }

    /// A singular field into an `Option`.
    #[inline(always)]
    pub(crate) fn opt<T: Decode>(
        self,
        slot: &mut Option<T>,
        msg: u16,
        index: usize,
    ) -> Result<(), Error> {
        let (message, field) = entry(msg, index);
        T::decode_field(slot, message, field, self.raw)
    }

    /// A singular field into a required field.
    #[inline(always)]
    pub(crate) fn req<T: Decode + Default>(
        self,
        slot: &mut T,
        msg: u16,
        index: usize,
    ) -> Result<(), Error> {
        let (message, field) = entry(msg, index);
        T::decode_field_required(slot, message, field, self.raw)
    }

    /// The run of a repeated or map field that starts here, `r` moved past it: refused if the
    /// field had a run already in this message.
    #[inline(always)]
    fn run(
        self,
        message: &'static Message,
        field: &'static Field,
        r: &mut Reader<'de>,
        level: &mut Level,
    ) -> Result<ValueDe<'de>, Error> {
        if level.done.iter().any(|f| std::ptr::eq(*f, field)) {
            return Err(Error::Invalid(format!(
                "field {} of {} in more than one run",
                field.name, message.name
            )));
        }
        level.done.push(field);
        let (run, count, after) = run_of(self.start, self.number)?;
        *r = after;
        Ok(ValueDe::Repeated {
            run,
            count,
            field,
            message,
        })
    }

    /// A repeated or map field into an `Option`.
    #[inline(always)]
    pub(crate) fn opt_run<T: Decode>(
        self,
        slot: &mut Option<T>,
        msg: u16,
        index: usize,
        r: &mut Reader<'de>,
        level: &mut Level,
    ) -> Result<(), Error> {
        let (message, field) = entry(msg, index);
        T::decode_option(slot, self.run(message, field, r, level)?)
    }

    /// A repeated or map field into a required field.
    #[inline(always)]
    pub(crate) fn req_run<T: Decode + Default>(
        self,
        slot: &mut T,
        msg: u16,
        index: usize,
        r: &mut Reader<'de>,
        level: &mut Level,
    ) -> Result<(), Error> {
        let (message, field) = entry(msg, index);
        T::decode_required(slot, self.run(message, field, r, level)?)
    }

    /// An object's `metadata`: without its managed fields if this level says so.
    #[inline(always)]
    pub(crate) fn metadata(
        self,
        slot: &mut ObjectMeta,
        msg: u16,
        index: usize,
        level: &Level,
    ) -> Result<(), Error> {
        let Some(v) = self.single(msg, index)? else {
            return Ok(());
        };
        match own_message::<ObjectMeta>(&v) {
            Some(bytes) if level.skip_managed_fields => {
                *slot = ObjectMeta::default();
                let _nested = crate::de::Nested::enter()?;
                slot.merge(
                    bytes,
                    &mut Level {
                        skip_managed_fields: true,
                        ..Level::default()
                    },
                )
            }
            _ => ObjectMeta::decode_required(slot, v),
        }
    }

    /// `ObjectMeta.managedFields`: walked over (its run still checked) if this level says so.
    #[inline(always)]
    pub(crate) fn managed_fields(
        self,
        slot: &mut Option<Vec<ManagedFieldsEntry>>,
        msg: u16,
        index: usize,
        r: &mut Reader<'de>,
        level: &mut Level,
    ) -> Result<(), Error> {
        let (message, field) = entry(msg, index);
        let run = self.run(message, field, r, level)?;
        if level.skip_managed_fields {
            return Ok(());
        }
        Decode::decode_option(slot, run)
    }

    /// The bytes of a Go struct embedded in the message, whose fields are the message's own.
    #[inline(always)]
    pub(crate) fn inline(self, msg: u16, index: usize) -> Result<&'de [u8], Error> {
        let (message, field) = entry(msg, index);
        self.inline_bytes(message, field)
    }

    /// A field the type does not have (of a version of k8s-openapi without it): read as the
    /// serde path reads a field its type ignores, and dropped; a number the table does not
    /// know is an error.
    #[inline(never)]
    pub(crate) fn other(
        self,
        msg: u16,
        r: &mut Reader<'de>,
        level: &mut Level,
    ) -> Result<(), Error> {
        let message = Value::message(msg);
        let field = message
            .field(self.number, &mut 0)
            .ok_or(Error::UnknownField {
                message: message.name,
                number: self.number,
            })?;
        match &field.kind {
            Kind::Value(Value::Msg(embedded)) if field.has(INLINE) => {
                let mut walk = Walk::new(
                    self.inline_bytes(message, field)?,
                    Value::message(*embedded),
                );
                while walk.next()?.is_some() {}
            }
            Kind::Value(value) if !field.has(REPEATED) => {
                single(message, field, value, self.raw)?;
            }
            _ => {
                self.run(message, field, r, level)?;
            }
        }
        Ok(())
    }

    fn inline_bytes(
        self,
        message: &'static Message,
        field: &'static Field,
    ) -> Result<&'de [u8], Error> {
        match self.raw {
            Raw::Bytes(bytes) => Ok(bytes),
            raw => Err(wrong_wire(message, field, &raw)),
        }
    }
}
