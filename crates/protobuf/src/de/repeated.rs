//! Repeated fields and maps: the run of a field's occurrences read as a sequence, or as the
//! entries of a map.

use serde::de::value::BorrowedStrDeserializer;
use serde::de::{DeserializeSeed, MapAccess, SeqAccess};

use crate::Error;
use crate::schema::{Field, Message, Value};
use crate::wire::{Raw, Reader};

use super::value::{ValueDe, element, utf8};
use super::{take_pending, wrong_wire};

/// The values of a repeated field.
#[derive(Debug)]
pub(crate) struct Elements<'de> {
    pub(crate) reader: Reader<'de>,
    pub(crate) field: &'static Field,
    pub(crate) message: &'static Message,
    pub(crate) value: &'static Value,
    /// A packed run of scalars being read.
    pub(crate) packed: Option<Reader<'de>>,
    /// Occurrences left in the run (the size hint, so that a list is allocated once).
    pub(crate) left: usize,
}

impl<'de> Elements<'de> {
    /// The next value of the run; `None` at its end.
    #[inline(always)]
    pub(crate) fn next_value(&mut self) -> Result<Option<ValueDe<'de>>, Error> {
        loop {
            if let Some(packed) = self.packed.as_mut() {
                if !packed.is_empty() {
                    let n = packed.varint()?;
                    let value = element(self.message, self.field, self.value, Raw::Varint(n))?;
                    return Ok(Some(value));
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
            return element(self.message, self.field, self.value, raw).map(Some);
        }
    }
}

impl<'de> SeqAccess<'de> for Elements<'de> {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Error> {
        match self.next_value()? {
            Some(value) => seed.deserialize(value).map(Some),
            None => Ok(None),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        (self.packed.is_none()).then_some(self.left)
    }
}

/// The entries of a map field: messages of `{1: key, 2: value}`.
#[derive(Debug)]
pub(crate) struct Entries<'de> {
    pub(crate) reader: Reader<'de>,
    pub(crate) field: &'static Field,
    pub(crate) message: &'static Message,
    pub(crate) value: &'static Value,
    pub(crate) pending: Option<ValueDe<'de>>,
}

impl<'de> Entries<'de> {
    /// The next entry's key and value; `None` at the end.
    #[inline(always)]
    pub(crate) fn entry(&mut self) -> Result<Option<(&'de str, ValueDe<'de>)>, Error> {
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
