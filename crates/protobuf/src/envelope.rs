//! What wraps a message on the wire: the `k8s\0` envelope (`runtime.Unknown`), a list read item
//! by item as its bytes arrive, and the length-prefixed frames of a watch.

use std::ops::Range;

use serde::Deserialize;

use crate::Error;
use crate::de::{MessageDe, from_message, utf8};
use crate::schema::{self, Kind, Message, Value};
use crate::wire::{Raw, Reader, peek_varint};

/// The four bytes that open every enveloped object.
pub const MAGIC: &[u8; 4] = b"k8s\0";

/// The longest watch frame read: a bigger length is taken as a corrupt stream.
pub const MAX_FRAME: usize = 64 << 20;

/// An enveloped object (`k8s\0` + `runtime.Unknown`): its type and its message's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Envelope<'a> {
    /// `typeMeta.apiVersion`.
    pub api_version: &'a str,
    /// `typeMeta.kind`.
    pub kind: &'a str,
    /// The message.
    pub raw: &'a [u8],
}

/// Opens an enveloped object. A body that does not start with `k8s\0`, an unknown field, or a
/// content encoding (none is defined) is an error.
pub fn open(bytes: &[u8]) -> Result<Envelope<'_>, Error> {
    let rest = bytes.strip_prefix(MAGIC).ok_or(Error::NotEnveloped)?;
    let mut envelope = Envelope {
        api_version: "",
        kind: "",
        raw: &[],
    };
    let mut reader = Reader::new(rest);
    while !reader.is_empty() {
        match reader.field()? {
            (1, Raw::Bytes(bytes)) => {
                (envelope.api_version, envelope.kind) = type_meta(bytes)?;
            }
            (2, Raw::Bytes(raw)) => envelope.raw = raw,
            (3, Raw::Bytes(encoding)) if !encoding.is_empty() => {
                return Err(Error::Invalid(format!(
                    "content encoding {:?}",
                    String::from_utf8_lossy(encoding)
                )));
            }
            (3 | 4, Raw::Bytes(_)) => {}
            (number, _) => {
                return Err(Error::UnknownField {
                    message: "runtime.Unknown",
                    number,
                });
            }
        }
    }
    Ok(envelope)
}

/// A `runtime.TypeMeta`: `apiVersion` and `kind`.
fn type_meta(bytes: &[u8]) -> Result<(&str, &str), Error> {
    let (mut api_version, mut kind) = ("", "");
    let mut reader = Reader::new(bytes);
    while !reader.is_empty() {
        match reader.field()? {
            (1, Raw::Bytes(b)) => api_version = utf8(b)?,
            (2, Raw::Bytes(b)) => kind = utf8(b)?,
            _ => return Err(Error::Invalid("runtime.TypeMeta".into())),
        }
    }
    Ok((api_version, kind))
}

impl<'a> Envelope<'a> {
    /// The object as a `T`, `apiVersion` and `kind` included, as in its JSON form.
    pub fn decode<T: Deserialize<'a>>(&self) -> Result<T, Error> {
        T::deserialize(self.deserializer()?)
    }

    pub(crate) fn deserializer(&self) -> Result<MessageDe<'a>, Error> {
        let message = self.message()?;
        Ok(MessageDe {
            buf: self.raw,
            message: message.0,
            type_meta: Some((self.api_version, self.kind)),
        })
    }

    /// The message of the object's type.
    pub fn message(&self) -> Result<MessageType, Error> {
        MessageType::for_kind(self.api_version, self.kind).ok_or_else(|| Error::UnknownKind {
            api_version: self.api_version.to_owned(),
            kind: self.kind.to_owned(),
        })
    }
}

/// An enveloped object as a `T` (see [`Envelope::decode`]).
pub fn from_slice<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, Error> {
    open(bytes)?.decode()
}

/// A message type of the Kubernetes API that this crate can read.
#[derive(Debug, Clone, Copy)]
pub struct MessageType(pub(crate) &'static Message);

impl MessageType {
    /// The message of a built-in `apiVersion` and `kind` (`v1` `Pod`, `apps/v1` `Deployment`,
    /// `v1` `Status`); `None` for a custom resource or a kind newer than this crate's table.
    pub fn for_kind(api_version: &str, kind: &str) -> Option<Self> {
        schema::for_kind(api_version, kind).map(Self)
    }

    /// Its full protobuf name (`k8s.io.api.core.v1.Pod`).
    pub fn name(&self) -> &'static str {
        self.0.name
    }

    /// Bare message bytes (not enveloped, as a list's items are) as a `T`.
    pub fn decode<'a, T: Deserialize<'a>>(&self, bytes: &'a [u8]) -> Result<T, Error> {
        from_message(bytes, self.0, None)
    }

    /// The number and message of the field called `name`, if it holds messages.
    fn message_field(&self, name: &str) -> Option<(u32, MessageType)> {
        self.0.fields.iter().find_map(|f| match f.kind {
            Kind::Value(Value::Msg(i)) if f.name == name => {
                Some((f.number, MessageType(Value::message(i))))
            }
            _ => None,
        })
    }
}

/// Where a [`ListDecoder`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum At {
    Magic,
    /// Among the fields of `runtime.Unknown`.
    Envelope,
    /// Inside its `raw` (the list message), with this many bytes of it still to come.
    List {
        left: usize,
    },
}

/// Reads a protobuf list response (an enveloped `…List`) item by item as its bytes arrive:
/// [`push`](Self::push) each chunk, take the items it completes with
/// [`next_item`](Self::next_item), then [`finish`](Self::finish). Bytes are held only until the
/// item they belong to is complete.
#[derive(Debug)]
pub struct ListDecoder {
    buf: Vec<u8>,
    pos: usize,
    at: At,
    /// The list's message, its `metadata` and `items` fields (from `typeMeta`).
    list: Option<ListShape>,
    metadata: Vec<u8>,
    seen_raw: bool,
}

#[derive(Debug, Clone, Copy)]
struct ListShape {
    list: MessageType,
    metadata: (u32, MessageType),
    items: (u32, MessageType),
}

impl Default for ListDecoder {
    fn default() -> Self {
        Self {
            buf: Vec::new(),
            pos: 0,
            at: At::Magic,
            list: None,
            metadata: Vec::new(),
            seen_raw: false,
        }
    }
}

/// A complete field at the start of `buf`: `(number, header length, value length)` for a
/// length-delimited one; `None` until its header is in.
fn header(buf: &[u8]) -> Result<Option<(u32, usize, usize)>, Error> {
    let Some((key, n)) = peek_varint(buf)? else {
        return Ok(None);
    };
    if key & 7 != 2 {
        return Err(Error::Invalid(format!(
            "wire type {} where a list holds messages",
            key & 7
        )));
    }
    let Some((len, m)) = peek_varint(&buf[n..])? else {
        return Ok(None);
    };
    let len = usize::try_from(len).map_err(|_| Error::LengthBeyondBuffer {
        len,
        left: usize::MAX,
    })?;
    let number = u32::try_from(key >> 3).map_err(|_| Error::Invalid("field number".into()))?;
    Ok(Some((number, n + m, len)))
}

/// What one step through a list body came to.
enum Progress {
    /// It moved on: step again.
    Moved,
    /// It needs more of the body.
    NeedBytes,
    /// An item: its bytes in the buffer, and its message type.
    Item(Range<usize>, MessageType),
}

impl ListDecoder {
    /// Takes the next chunk of the body.
    pub fn push(&mut self, chunk: &[u8]) {
        if self.pos > 0 {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        self.buf.extend_from_slice(chunk);
    }

    /// The next complete item and its message type; `None` until more bytes come.
    pub fn next_item(&mut self) -> Result<Option<(&[u8], MessageType)>, Error> {
        Ok(self.next_item_at()?.map(|(at, kind)| (&self.buf[at], kind)))
    }

    /// [`next_item`](Self::next_item), as where the item's bytes are ([`bytes`](Self::bytes)
    /// reads them). A position stays valid until the next [`push`](Self::push), so the
    /// complete items of a chunk can be gathered first and decoded together.
    pub fn next_item_at(&mut self) -> Result<Option<(Range<usize>, MessageType)>, Error> {
        loop {
            match self.step()? {
                Progress::Moved => {}
                Progress::NeedBytes => return Ok(None),
                Progress::Item(range, kind) => return Ok(Some((range, kind))),
            }
        }
    }

    /// The bytes at `at`, a position [`next_item_at`](Self::next_item_at) returned since the
    /// last [`push`](Self::push).
    ///
    /// # Panics
    ///
    /// If `at` is beyond the buffer, which no such position is.
    pub fn bytes(&self, at: Range<usize>) -> &[u8] {
        &self.buf[at]
    }

    /// One step through the body, from where it is.
    fn step(&mut self) -> Result<Progress, Error> {
        match self.at {
            At::Magic => self.magic(),
            At::Envelope => self.envelope_field(),
            At::List { left: 0 } => {
                self.at = At::Envelope;
                Ok(Progress::Moved)
            }
            At::List { left } => self.list_field(left),
        }
    }

    /// The `k8s\0` magic that opens the body.
    fn magic(&mut self) -> Result<Progress, Error> {
        let buf = &self.buf[self.pos..];
        if buf.len() < MAGIC.len() {
            return Ok(Progress::NeedBytes);
        }
        if &buf[..4] != MAGIC {
            return Err(Error::NotEnveloped);
        }
        self.pos += 4;
        self.at = At::Envelope;
        Ok(Progress::Moved)
    }

    /// A field of the `runtime.Unknown` envelope: its `typeMeta`, the list's bytes (read field
    /// by field, without waiting for all of them), its encodings.
    fn envelope_field(&mut self) -> Result<Progress, Error> {
        let buf = &self.buf[self.pos..];
        let Some((number, head, len)) = header(buf)? else {
            return Ok(Progress::NeedBytes);
        };
        if number == 2 {
            if self.list.is_none() {
                return Err(Error::Invalid("a list's items before its typeMeta".into()));
            }
            self.pos += head;
            self.seen_raw = true;
            self.at = At::List { left: len };
            return Ok(Progress::Moved);
        }
        // `len` may be near `u64::MAX`: compared with what is left, never added.
        if buf.len() - head < len {
            return Ok(Progress::NeedBytes);
        }
        let value = &buf[head..head + len];
        match number {
            1 => self.list = Some(list_shape(value)?),
            3 if !value.is_empty() => {
                return Err(Error::Invalid("a list with a content encoding".into()));
            }
            3 | 4 => {}
            number => {
                return Err(Error::UnknownField {
                    message: "runtime.Unknown",
                    number,
                });
            }
        }
        self.pos += head + len;
        Ok(Progress::Moved)
    }

    /// A field of the list, `left` bytes of it to go: an item, or the list's metadata.
    fn list_field(&mut self, left: usize) -> Result<Progress, Error> {
        let buf = &self.buf[self.pos..];
        let Some((number, head, len)) = header(&buf[..buf.len().min(left)])? else {
            if buf.len() >= left {
                return Err(Error::Truncated("a list's field header"));
            }
            return Ok(Progress::NeedBytes);
        };
        // `head <= left`: the header was read within `left` bytes.
        if len > left - head {
            return Err(Error::LengthBeyondBuffer {
                len: len as u64,
                left: left - head,
            });
        }
        if buf.len() < head + len {
            return Ok(Progress::NeedBytes);
        }
        let shape = self.list.ok_or(Error::Truncated("a list's typeMeta"))?;
        self.pos += head + len;
        self.at = At::List {
            left: left - head - len,
        };
        let start = self.pos - len;
        if number == shape.items.0 {
            return Ok(Progress::Item(start..self.pos, shape.items.1));
        }
        if number != shape.metadata.0 {
            return Err(Error::UnknownField {
                message: shape.list.name(),
                number,
            });
        }
        self.metadata = self.buf[start..self.pos].to_vec();
        Ok(Progress::Moved)
    }

    /// The selector of the list's `metadata.shardInfo` (`ListMeta` field 5, `ShardInfo` field
    /// 1: the shard selector the server applied, KEP-5866), once the body has ended; `None`
    /// when the metadata has none (a list not filtered by shard). Read apart from
    /// [`finish`](Self::finish), whose `ListMeta` types may predate the field.
    pub fn shard_info(&self) -> Result<Option<String>, Error> {
        let Some(info) = last_bytes_field(&self.metadata, LIST_META_SHARD_INFO)? else {
            return Ok(None);
        };
        match last_bytes_field(info, 1)? {
            Some(selector) => Ok(Some(utf8(selector)?.to_owned())),
            None => Ok(None),
        }
    }

    /// The list's metadata as an `M` (a `ListMeta`), once the body has ended, its
    /// `shardInfo` left out (read it with [`shard_info`](Self::shard_info)). A body that
    /// ended inside the list is [`Error::Truncated`].
    pub fn finish<M: serde::de::DeserializeOwned>(self) -> Result<M, Error> {
        if self.at != At::Envelope || self.pos != self.buf.len() || !self.seen_raw {
            return Err(Error::Truncated("a list"));
        }
        let shape = self.list.ok_or(Error::Truncated("a list"))?;
        shape
            .metadata
            .1
            .decode(&without_field(&self.metadata, LIST_META_SHARD_INFO)?)
    }
}

/// `ListMeta.shardInfo`'s field number (newer than the schema the table was generated from).
const LIST_META_SHARD_INFO: u32 = 5;

/// `message` without its fields `number`.
fn without_field(message: &[u8], number: u32) -> Result<Vec<u8>, Error> {
    let mut reader = Reader::new(message);
    let mut kept = Vec::with_capacity(message.len());
    while !reader.is_empty() {
        let before = reader.rest();
        let (n, _) = reader.field()?;
        if n != number {
            kept.extend_from_slice(&before[..before.len() - reader.rest().len()]);
        }
    }
    Ok(kept)
}

/// The bytes of the last field `number` of `message` (the value protobuf keeps when a
/// singular field repeats); a field of that number that is not length-delimited is an error.
fn last_bytes_field(message: &[u8], number: u32) -> Result<Option<&[u8]>, Error> {
    let mut reader = Reader::new(message);
    let mut last = None;
    while !reader.is_empty() {
        match reader.field()? {
            (n, Raw::Bytes(bytes)) if n == number => last = Some(bytes),
            (n, raw) if n == number => {
                return Err(Error::Invalid(format!(
                    "wire type {} for field {number}",
                    raw.wire_type()
                )));
            }
            _ => {}
        }
    }
    Ok(last)
}

fn list_shape(bytes: &[u8]) -> Result<ListShape, Error> {
    let (api_version, kind) = type_meta(bytes)?;
    let envelope = Envelope {
        api_version,
        kind,
        raw: &[],
    };
    let list = envelope.message()?;
    let (Some(metadata), Some(items)) =
        (list.message_field("metadata"), list.message_field("items"))
    else {
        return Err(Error::Invalid(format!("{} is not a list", envelope.kind)));
    };
    Ok(ListShape {
        list,
        metadata,
        items,
    })
}

/// Splits a watch body into its frames: each a 4-byte big-endian length, then a
/// `meta.v1.WatchEvent` message.
#[derive(Debug, Default)]
pub struct FrameDecoder {
    buf: Vec<u8>,
    pos: usize,
}

impl FrameDecoder {
    /// Takes the next chunk of the body.
    pub fn push(&mut self, chunk: &[u8]) {
        if self.pos > 0 {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        self.buf.extend_from_slice(chunk);
    }

    /// Takes the next chunk of the body, keeping the positions returned since the last
    /// [`push`](Self::push) valid: the frames read stay in the buffer until a `push` or a
    /// [`take_read`](Self::take_read).
    pub fn append(&mut self, chunk: &[u8]) {
        self.buf.extend_from_slice(chunk);
    }

    /// The next complete frame; `None` until more bytes come. A length over [`MAX_FRAME`] is an
    /// error (the stream is corrupt).
    pub fn next_frame(&mut self) -> Result<Option<&[u8]>, Error> {
        Ok(self.next_frame_at()?.map(|at| &self.buf[at]))
    }

    /// [`next_frame`](Self::next_frame), as where the frame's bytes are
    /// ([`bytes`](Self::bytes) reads them). A position stays valid until the next
    /// [`push`](Self::push), so the complete frames of a chunk can be gathered first and
    /// decoded together.
    pub fn next_frame_at(&mut self) -> Result<Option<Range<usize>>, Error> {
        let buf = &self.buf[self.pos..];
        let Some((len, rest)) = buf.split_first_chunk::<4>() else {
            return Ok(None);
        };
        let len = u32::from_be_bytes(*len) as usize;
        if len > MAX_FRAME {
            return Err(Error::FrameTooLarge(len));
        }
        if rest.len() < len {
            return Ok(None);
        }
        let start = self.pos + 4;
        self.pos = start + len;
        Ok(Some(start..self.pos))
    }

    /// The bytes at `at`, a position [`next_frame_at`](Self::next_frame_at) returned since the
    /// last [`push`](Self::push).
    ///
    /// # Panics
    ///
    /// If `at` is beyond the buffer, which no such position is.
    pub fn bytes(&self, at: Range<usize>) -> &[u8] {
        &self.buf[at]
    }

    /// The buffer up to the end of the last frame [`next_frame_at`](Self::next_frame_at)
    /// returned, so that the positions it returned since the last [`push`](Self::push) can be
    /// read elsewhere (on other threads) while the decoder takes more chunks; the decoder keeps
    /// the bytes after them (a frame begun), and its next positions start from them. It goes
    /// on in `spare`, whose bytes are dropped and whose capacity is kept (a buffer taken
    /// before, given back, saves allocating and touching fresh memory).
    pub fn take_read(&mut self, mut spare: Vec<u8>) -> Vec<u8> {
        spare.clear();
        spare.extend_from_slice(&self.buf[self.pos..]);
        let mut read = std::mem::replace(&mut self.buf, spare);
        read.truncate(self.pos);
        self.pos = 0;
        read
    }

    /// Bytes of a frame that has not ended (a stream cut inside one).
    pub fn pending(&self) -> usize {
        self.buf.len() - self.pos
    }
}

/// One watch event: its type (`ADDED`, `MODIFIED`, `DELETED`, `BOOKMARK`, `ERROR`) and its
/// object, enveloped (open it with [`open`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatchEvent<'a> {
    /// The event's type.
    pub event_type: &'a str,
    /// The enveloped object.
    pub object: &'a [u8],
}

/// Reads a watch frame's `meta.v1.WatchEvent`.
pub fn watch_event(frame: &[u8]) -> Result<WatchEvent<'_>, Error> {
    let mut event = WatchEvent {
        event_type: "",
        object: &[],
    };
    let mut reader = Reader::new(frame);
    while !reader.is_empty() {
        match reader.field()? {
            (1, Raw::Bytes(b)) => event.event_type = utf8(b)?,
            (2, Raw::Bytes(raw_extension)) => {
                let mut inner = Reader::new(raw_extension);
                while !inner.is_empty() {
                    match inner.field()? {
                        (1, Raw::Bytes(b)) => event.object = b,
                        (number, _) => {
                            return Err(Error::UnknownField {
                                message: "runtime.RawExtension",
                                number,
                            });
                        }
                    }
                }
            }
            (number, _) => {
                return Err(Error::UnknownField {
                    message: "meta.v1.WatchEvent",
                    number,
                });
            }
        }
    }
    if event.event_type.is_empty() {
        return Err(Error::Invalid("a watch event without a type".into()));
    }
    Ok(event)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A length-delimited field.
    fn field(number: u32, value: &[u8]) -> Vec<u8> {
        let mut out = vec![u8::try_from(number << 3 | 2).unwrap()];
        out.push(u8::try_from(value.len()).unwrap());
        out.extend_from_slice(value);
        out
    }

    /// A `ConfigMapList` body with `metadata` as its `ListMeta` and no item.
    fn list_body(metadata: &[u8]) -> Vec<u8> {
        let type_meta = [field(1, b"v1"), field(2, b"ConfigMapList")].concat();
        let list = field(1, metadata);
        [MAGIC.to_vec(), field(1, &type_meta), field(2, &list)].concat()
    }

    fn decoded(metadata: &[u8]) -> ListDecoder {
        let mut decoder = ListDecoder::default();
        decoder.push(&list_body(metadata));
        assert!(decoder.next_item().unwrap().is_none());
        decoder
    }

    #[test]
    fn a_list_tells_the_shard_selector_of_its_shard_info() {
        let selector =
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')";
        let meta = [field(2, b"7"), field(5, &field(1, selector.as_bytes()))].concat();
        let decoder = decoded(&meta);
        assert_eq!(decoder.shard_info().unwrap().as_deref(), Some(selector));
        let meta: serde_json::Value = decoder.finish().unwrap();
        assert_eq!(meta["resourceVersion"], "7");
    }

    #[test]
    fn a_list_without_shard_info_or_with_an_empty_one_tells_none() {
        assert_eq!(decoded(&field(2, b"7")).shard_info().unwrap(), None);
        assert_eq!(decoded(&field(5, b"")).shard_info().unwrap(), None);
    }

    #[test]
    fn a_malformed_shard_info_is_an_error() {
        // Field 5 as a varint, and a selector that is not UTF-8.
        assert!(decoded(&[5 << 3, 1]).shard_info().is_err());
        let bad = field(5, &field(1, &[0xff, 0xfe]));
        assert!(decoded(&bad).shard_info().is_err());
    }

    /// A frame of `payload`: its length, big-endian, then the bytes.
    fn frame(payload: &[u8]) -> Vec<u8> {
        let mut frame = (payload.len() as u32).to_be_bytes().to_vec();
        frame.extend_from_slice(payload);
        frame
    }

    #[test]
    fn the_frames_read_are_taken_away_and_the_frame_begun_stays() {
        let mut body = [frame(b"one"), frame(b"two"), frame(b"three")].concat();
        let begun = body.len() - 3;
        let mut frames = FrameDecoder::default();
        frames.push(&body[..begun]);
        let at = [(); 2].map(|()| frames.next_frame_at().unwrap().expect("a frame"));
        assert_eq!(frames.next_frame_at(), Ok(None));
        let read = frames.take_read(b"spare".to_vec());
        assert_eq!(
            [&read[at[0].clone()], &read[at[1].clone()]],
            [b"one", b"two"]
        );
        assert_eq!(
            frames.pending(),
            6,
            "the third frame's length and first bytes stay"
        );
        // Nothing was read since: nothing is taken.
        assert!(frames.take_read(read).is_empty());
        frames.push(&body.split_off(begun));
        let three = frames.next_frame_at().unwrap().expect("a frame");
        assert_eq!(frames.pending(), 0);
        // Appended, a chunk leaves the frames read where they were.
        frames.append(&frame(b"four"));
        let four = frames.next_frame_at().unwrap().expect("a frame");
        assert_eq!(
            [frames.bytes(three), frames.bytes(four)],
            [b"three" as &[u8], b"four"]
        );
    }

    #[test]
    fn garbage_where_a_frame_length_belongs_is_an_error() {
        let mut frames = FrameDecoder::default();
        frames.push(b"this is not json\n");
        assert_eq!(frames.next_frame(), Err(Error::FrameTooLarge(0x7468_6973)));
    }
}
