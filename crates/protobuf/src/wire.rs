//! The protobuf wire format: varints, tags and the four kinds of values a field holds.

use crate::Error;

/// A field's value as the wire holds it, before its schema gives it a meaning.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Raw<'a> {
    /// Wire type 0.
    Varint(u64),
    /// Wire type 1.
    Fixed64(u64),
    /// Wire type 2: a string, bytes, a message or a packed run.
    Bytes(&'a [u8]),
    /// Wire type 5.
    Fixed32,
}

impl Raw<'_> {
    /// The wire type's number, for error messages.
    pub(crate) fn wire_type(&self) -> u8 {
        match self {
            Raw::Varint(_) => 0,
            Raw::Fixed64(_) => 1,
            Raw::Bytes(_) => 2,
            Raw::Fixed32 => 5,
        }
    }
}

/// Reads fields off a message's bytes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Self { buf }
    }

    /// The bytes not read yet.
    pub(crate) fn rest(&self) -> &'a [u8] {
        self.buf
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The next field: its number and value.
    #[inline(always)]
    pub(crate) fn field(&mut self) -> Result<(u32, Raw<'a>), Error> {
        let key = self.varint()?;
        let number = u32::try_from(key >> 3)
            .ok()
            .filter(|n| *n != 0)
            .ok_or_else(|| Error::Invalid(format!("field number {}", key >> 3)))?;
        let raw = match key & 7 {
            0 => Raw::Varint(self.varint()?),
            1 => Raw::Fixed64(u64::from_le_bytes(self.fixed::<8>()?)),
            2 => {
                let len = self.varint()?;
                let left = self.buf.len();
                let n = usize::try_from(len)
                    .ok()
                    .filter(|n| *n <= left)
                    .ok_or(Error::LengthBeyondBuffer { len, left })?;
                let (value, rest) = self.buf.split_at(n);
                self.buf = rest;
                Raw::Bytes(value)
            }
            5 => {
                self.fixed::<4>()?;
                Raw::Fixed32
            }
            other => return Err(Error::Invalid(format!("wire type {other}"))),
        };
        Ok((number, raw))
    }

    #[inline(always)]
    fn fixed<const N: usize>(&mut self) -> Result<[u8; N], Error> {
        let Some((head, rest)) = self.buf.split_first_chunk::<N>() else {
            return Err(Error::Truncated("a fixed-width value"));
        };
        self.buf = rest;
        Ok(*head)
    }

    /// A base-128 varint.
    #[inline(always)]
    pub(crate) fn varint(&mut self) -> Result<u64, Error> {
        if let Some((&b, rest)) = self.buf.split_first()
            && b < 0x80
        {
            self.buf = rest;
            return Ok(u64::from(b));
        }
        let mut value = 0u64;
        for (i, &b) in self.buf.iter().enumerate().take(10) {
            value |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                self.buf = &self.buf[i + 1..];
                return Ok(value);
            }
        }
        if self.buf.len() >= 10 {
            Err(Error::Invalid("a varint longer than 10 bytes".into()))
        } else {
            Err(Error::Truncated("a varint"))
        }
    }
}

/// A varint at the start of `buf`: its value and length; `None` if `buf` ends inside it.
pub(crate) fn peek_varint(buf: &[u8]) -> Result<Option<(u64, usize)>, Error> {
    let mut reader = Reader::new(buf);
    match reader.varint() {
        Ok(v) => Ok(Some((v, buf.len() - reader.rest().len()))),
        Err(Error::Truncated(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_read_as_written_and_cut_ones_are_truncated() {
        for (bytes, value) in [
            (&[0x00][..], 0u64),
            (&[0x96, 0x01], 150),
            (&[0xff, 0xff, 0xff, 0xff, 0x0f], u64::from(u32::MAX)),
            (
                &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01],
                u64::MAX,
            ),
        ] {
            assert_eq!(Reader::new(bytes).varint().unwrap(), value);
            assert_eq!(peek_varint(bytes).unwrap(), Some((value, bytes.len())));
        }
        assert!(matches!(
            Reader::new(&[0x96]).varint(),
            Err(Error::Truncated(_))
        ));
        assert_eq!(peek_varint(&[0x96]).unwrap(), None);
        assert!(matches!(
            Reader::new(&[0xff; 11]).varint(),
            Err(Error::Invalid(_))
        ));
    }

    #[test]
    fn a_length_beyond_the_buffer_is_an_error_not_a_panic() {
        // field 1, wire type 2, length 100, then 2 bytes.
        let mut reader = Reader::new(&[0x0a, 100, 1, 2]);
        assert!(matches!(
            reader.field(),
            Err(Error::LengthBeyondBuffer { len: 100, left: 2 })
        ));
        // wire types 3 and 4 (groups) and field number 0 are refused.
        assert!(Reader::new(&[0x0b]).field().is_err());
        assert!(Reader::new(&[0x02, 0]).field().is_err());
    }
}
