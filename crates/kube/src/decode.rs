//! The adapter's own decoding of list and watch responses, on kube-client's raw request API
//! ([`kube::Client::send`]): kube-client still builds and sends every request (auth, TLS,
//! config and middleware are kube's), and this module reads the body.
//!
//! * **Watch**: the body's chunks are framed into lines without copying a line that arrives
//!   whole in one chunk, and each line is decoded from its bytes (kube-client copies every
//!   line into a `String` first). The rules are kube-client's, so that nothing changes for a
//!   caller: lines end at `\n` (a trailing `\r` dropped); a line that is not UTF-8 is a decode
//!   error; a line that is a prefix of valid JSON (a last line torn by a closing connection) is
//!   skipped; a line that is not an event but is a `Status` is an API error; a body that ends
//!   with an unexpected EOF ends the stream quietly, to be resumed.
//! * **List**: the body is decoded item by item as its bytes arrive ([`ListScanner`]): each
//!   item is decoded as soon as its last byte is in, and its bytes are dropped, so the body is
//!   never held whole (kube-client collects the body, copies it into a `String`, and decodes
//!   that: a relist of a big collection held the text and the objects at once).

use std::sync::Arc;

use bytes::{Buf, Bytes, BytesMut};
use futures::{Stream, StreamExt};
use http_body_util::BodyExt;
use informer_reflector::{Error, ListPage, ListSink};
use kube::client::Body;
use memchr::{memchr, memchr2};
use serde::Deserialize;
use serde::de::DeserializeOwned;

use crate::error::error_from_kube;
use crate::protobuf::Encoding;
use crate::skip::WithoutManagedFields;

/// How objects are decoded: whole, or without their `metadata.managedFields`
/// ([`crate::skip`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Decoding {
    /// Leave `metadata.managedFields` out of every object.
    pub(crate) skip_managed_fields: bool,
}

impl Decoding {
    /// Decodes `text` as a `T` (an object, or a watch event of one) through
    /// [`WithoutManagedFields`] when managed fields are skipped.
    pub(crate) fn decode<T, S>(
        self,
        text: &str,
        unwrap: impl FnOnce(S) -> T,
    ) -> serde_json::Result<T>
    where
        T: DeserializeOwned,
        S: DeserializeOwned,
    {
        if self.skip_managed_fields {
            match serde_json::from_str::<S>(text) {
                Ok(object) => Ok(unwrap(object)),
                // serde_json reads a skipped value more loosely at the end of its input: a
                // number cut right after its `-` is "invalid number" there, where the whole
                // decoder says "EOF". A text the whole decoder finds cut short is cut short
                // (its decode has no error before the end, so this one has none either).
                Err(skipping) if !skipping.is_eof() => match serde_json::from_str::<T>(text) {
                    Err(whole) if whole.is_eof() => Err(whole),
                    _ => Err(skipping),
                },
                Err(skipping) => Err(skipping),
            }
        } else {
            serde_json::from_str::<T>(text)
        }
    }
}

/// Sends `request` through `client` (kube-client's middleware, auth and TLS) and returns the
/// response's body if the status is a success; otherwise the server's `Status` as an error,
/// as kube-client reports it.
pub(crate) async fn send(
    client: &kube::Client,
    request: http::Request<Vec<u8>>,
) -> Result<(Body, Encoding), Error> {
    let response = client
        .send(request.map(Body::from))
        .await
        .map_err(error_from_kube)?;
    let status = response.status();
    let encoding = match response.headers().get(http::header::CONTENT_TYPE) {
        Some(t) if t.to_str().is_ok_and(informer_protobuf::is_protobuf) => Encoding::Protobuf,
        _ => Encoding::Json,
    };
    if !(status.is_client_error() || status.is_server_error()) {
        return Ok((response.into_body(), encoding));
    }
    let bytes = response
        .into_body()
        .collect()
        .await
        .map_err(|e| error_from_kube(kube::Error::Service(Box::new(e))))?
        .to_bytes();
    let decoded = match encoding {
        Encoding::Protobuf => crate::protobuf::status(&bytes).ok_or(()),
        Encoding::Json => serde_json::from_slice::<kube::core::Status>(&bytes).map_err(|_| ()),
    };
    let status = match decoded {
        Ok(status) => status,
        // Not every error body is a Status (a proxy's text, a bare 404): kube-client makes
        // one with the HTTP code, and so does this.
        Err(_) => kube::core::Status::failure(
            String::from_utf8_lossy(&bytes).trim(),
            "Failed to parse error data",
        )
        .with_code(status.as_u16()),
    };
    Err(error_from_kube(kube::Error::Api(status.boxed())))
}

/// A body's data chunks; a transport failure as kube-client reports it.
pub(crate) fn chunks(body: Body) -> impl Stream<Item = Result<Bytes, std::io::Error>> + Send {
    body.into_data_stream().map(|chunk| {
        chunk.map_err(|e| {
            // kube-client's classification: a chunked body cut short ends a watch quietly.
            let text = e.to_string();
            if text.contains("unexpected EOF during chunk") || is_unexpected_eof(&e) {
                std::io::Error::new(std::io::ErrorKind::UnexpectedEof, e)
            } else {
                std::io::Error::other(e)
            }
        })
    })
}

fn is_unexpected_eof(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut current = Some(err);
    while let Some(e) = current {
        if e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::UnexpectedEof)
        {
            return true;
        }
        current = e.source();
    }
    false
}

/// Splits a stream of chunks into lines (without their `\n`).
#[derive(Debug, Default)]
pub(crate) struct Lines {
    /// The start of a line that has not ended yet.
    partial: BytesMut,
}

impl Lines {
    /// The lines that end in `chunk`, in order.
    pub(crate) fn push(&mut self, mut chunk: Bytes, out: &mut impl Extend<Bytes>) {
        while let Some(at) = memchr(b'\n', &chunk) {
            let mut line = chunk.split_to(at + 1);
            line.truncate(at);
            if self.partial.is_empty() {
                out.extend([line]);
            } else {
                self.partial.extend_from_slice(&line);
                out.extend([self.partial.split().freeze()]);
            }
        }
        if !chunk.is_empty() {
            self.partial.extend_from_slice(&chunk);
        }
    }

    /// The last line, if the body did not end with `\n`.
    pub(crate) fn finish(&mut self) -> Option<Bytes> {
        (!self.partial.is_empty()).then(|| self.partial.split().freeze())
    }
}

/// An object decoded, then moved into its `Arc`: one allocation of the object. (serde's own
/// `Arc<T>` decodes into a `Box<T>` and moves that into a new `Arc`: for a `Pod`, kilobytes by
/// value, a second allocation in the allocator's slower large sizes, a copy and a free more per
/// event.)
pub(crate) struct InArc<K>(pub(crate) Arc<K>);

impl<'de, K: Deserialize<'de>> Deserialize<'de> for InArc<K> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        K::deserialize(deserializer).map(|object| InArc(Arc::new(object)))
    }
}

/// One watch line decoded as kube-client decodes it; `None` for a line it skips. The object is
/// put in its `Arc` as it is decoded: an event then moves a pointer, not the object (a `Pod` is
/// kilobytes by value), on its way to the reflector.
pub(crate) fn watch_line<K: DeserializeOwned>(
    line: &[u8],
    decoding: Decoding,
) -> Option<Result<kube::api::WatchEvent<Arc<K>>, kube::Error>> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let text = match std::str::from_utf8(line) {
        Ok(text) => text,
        Err(_) => {
            return Some(Err(kube::Error::ReadEvents(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "stream did not contain valid UTF-8",
            ))));
        }
    };
    let decoded = decoding.decode(text, |event| {
        map_event(event, |o: WithoutManagedFields<InArc<K>>| o.0)
    });
    match decoded {
        Ok(event) => Some(Ok(map_event(event, |o: InArc<K>| o.0))),
        // JSON that ended early: skipped, as kube-client skips it (a torn last line).
        Err(e) if e.is_eof() => None,
        Err(e) => Some(Err(
            match serde_json::from_str::<kube::core::Status>(text) {
                Ok(status) => kube::Error::Api(status.boxed()),
                Err(_) => kube::Error::SerdeError(e),
            },
        )),
    }
}

/// A watch event with `f` applied to its object.
fn map_event<A, B>(
    event: kube::api::WatchEvent<A>,
    f: impl FnOnce(A) -> B,
) -> kube::api::WatchEvent<B> {
    use kube::api::WatchEvent as E;
    match event {
        E::Added(o) => E::Added(f(o)),
        E::Modified(o) => E::Modified(f(o)),
        E::Deleted(o) => E::Deleted(f(o)),
        E::Bookmark(b) => E::Bookmark(b),
        E::Error(e) => E::Error(e),
    }
}

/// The watch events of `body`, as kube-client's `request_events` yields them.
pub(crate) fn watch_events<K>(
    body: Body,
    decoding: Decoding,
) -> impl Stream<Item = Result<kube::api::WatchEvent<Arc<K>>, kube::Error>> + Send
where
    K: DeserializeOwned + Send + Sync + 'static,
{
    let state = (
        chunks(body).boxed(),
        Lines::default(),
        std::collections::VecDeque::<Bytes>::new(),
        false,
    );
    futures::stream::unfold(
        state,
        move |(mut body, mut lines, mut ready, mut ended)| async move {
            loop {
                while let Some(line) = ready.pop_front() {
                    if let Some(event) = watch_line::<K>(&line, decoding) {
                        if matches!(event, Err(kube::Error::ReadEvents(_))) {
                            // kube-client's line decoder ends the stream at a line that is not
                            // UTF-8.
                            ended = true;
                            ready.clear();
                        }
                        return Some((event, (body, lines, ready, ended)));
                    }
                }
                if ended {
                    return None;
                }
                match body.next().await {
                    Some(Ok(chunk)) => lines.push(chunk, &mut ready),
                    Some(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                        tracing::debug!("watch body cut short: {e}");
                        ended = true;
                    }
                    Some(Err(e)) => {
                        ended = true;
                        ready.clear();
                        return Some((
                            Err(kube::Error::ReadEvents(e)),
                            (body, lines, ready, ended),
                        ));
                    }
                    None => {
                        ended = true;
                        ready.extend(lines.finish());
                    }
                }
            }
        },
    )
}

/// Decodes JSON bytes as `decoding` says: validated as UTF-8 whole first (a fast pass), then
/// decoded as text, which spares serde_json a check of every string as it goes (measured faster
/// than `from_slice`).
fn from_bytes<T: DeserializeOwned>(bytes: &[u8], decoding: Decoding) -> Result<T, String> {
    let text = std::str::from_utf8(bytes).map_err(|e| e.to_string())?;
    decoding
        .decode(text, |o: WithoutManagedFields<T>| o.0)
        .map_err(|e| e.to_string())
}

/// Where a [`ListScanner`] is in the list object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum At {
    /// Before the list's `{`.
    Start,
    /// Before a key of the list object, or its `}`.
    Key,
    /// In a key (`start`: after its opening quote).
    InKey { start: usize },
    /// After a key, before its `:`.
    Colon,
    /// Before a value.
    Value,
    /// Skipping or taking a value that began at `start`.
    InValue { start: usize },
    /// Inside `items`, before an item, a `,` or the `]`.
    Item,
    /// In an item that began at `start`.
    InItem { start: usize },
    /// After the list's `}`.
    End,
}

/// Which key's value is being read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Metadata,
    Items,
    Other,
}

/// Decodes a list response (`{"kind":…,"metadata":{…},"items":[…]}`) item by item as its bytes
/// arrive: [`push`](Self::push) each chunk, then [`finish`](Self::finish). Bytes are held only
/// until the value they belong to is complete.
///
/// The scanner finds where each value ends (tracking strings, escapes and nesting), and
/// `serde_json` decodes it: the item, the list's `metadata`; other keys are skipped. Anything
/// that is not such an object is a decode error.
pub(crate) struct ListScanner<K> {
    buf: BytesMut,
    /// How far `buf` has been scanned.
    pos: usize,
    at: At,
    field: Field,
    /// Nesting of the value being scanned.
    depth: usize,
    in_string: bool,
    escaped: bool,
    /// The value being scanned is a string or a scalar (not an object or array).
    scalar: Option<u8>,
    metadata: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta>,
    /// Items decoded so far.
    decoded: usize,
    /// The items' type (each goes to the sink as it is decoded).
    item: std::marker::PhantomData<fn() -> K>,
    decoding: Decoding,
}

fn bad(message: impl Into<String>) -> Error {
    Error::decode(format!("list response: {}", message.into()))
}

impl<K: DeserializeOwned> Default for ListScanner<K> {
    fn default() -> Self {
        Self {
            buf: BytesMut::new(),
            pos: 0,
            at: At::Start,
            field: Field::Other,
            depth: 0,
            in_string: false,
            escaped: false,
            scalar: None,
            metadata: None,
            decoded: 0,
            item: std::marker::PhantomData,
            decoding: Decoding::default(),
        }
    }
}

impl<K: DeserializeOwned> ListScanner<K> {
    /// A scanner that decodes items as `decoding` says.
    pub(crate) fn new(decoding: Decoding) -> Self {
        Self {
            decoding,
            ..Self::default()
        }
    }

    /// Takes the next chunk of the body, decoding every item it completes into `sink`.
    pub(crate) fn push(&mut self, chunk: &[u8], sink: &mut ListSink<'_, K>) -> Result<(), Error>
    where
        K: Send + Sync,
    {
        self.buf.extend_from_slice(chunk);
        self.scan(sink)
    }

    /// The page, once the body has ended, with `items` (what the sink kept).
    pub(crate) fn finish(self, items: Vec<Arc<K>>) -> Result<ListPage<K>, Error> {
        if self.at != At::End {
            return Err(bad("ended early"));
        }
        let metadata = self.metadata.unwrap_or_default();
        let resource_version = metadata
            .resource_version
            .filter(|rv| !rv.is_empty())
            .ok_or_else(|| Error::decode("list response without metadata.resourceVersion"))?;
        Ok(ListPage {
            items,
            resource_version,
            continue_token: metadata.continue_.filter(|c| !c.is_empty()),
        })
    }

    fn scan(&mut self, sink: &mut ListSink<'_, K>) -> Result<(), Error>
    where
        K: Send + Sync,
    {
        while self.pos < self.buf.len() {
            let b = self.buf[self.pos];
            match self.at {
                At::Start | At::Key | At::Colon | At::Value | At::Item | At::End
                    if b.is_ascii_whitespace() =>
                {
                    self.pos += 1;
                }
                At::Start => {
                    if b != b'{' {
                        return Err(bad("not a JSON object"));
                    }
                    self.pos += 1;
                    self.at = At::Key;
                }
                At::Key => {
                    self.pos += 1;
                    match b {
                        b'"' => self.at = At::InKey { start: self.pos },
                        b',' => {}
                        b'}' => self.at = At::End,
                        _ => return Err(bad("expected a key")),
                    }
                }
                At::InKey { start } => {
                    // Keys of a list are plain words: an escape in one is not one of ours.
                    match memchr(b'"', &self.buf[self.pos..]) {
                        Some(n) => {
                            let key = &self.buf[start..self.pos + n];
                            self.field = match key {
                                b"metadata" => Field::Metadata,
                                b"items" => Field::Items,
                                _ => Field::Other,
                            };
                            self.pos += n + 1;
                            self.at = At::Colon;
                        }
                        None => self.pos = self.buf.len(),
                    }
                }
                At::Colon => {
                    if b != b':' {
                        return Err(bad("expected ':'"));
                    }
                    self.pos += 1;
                    self.at = At::Value;
                }
                At::Value => {
                    if self.field == Field::Items {
                        match b {
                            b'[' => {
                                self.pos += 1;
                                self.at = At::Item;
                            }
                            b'n' => {
                                // "items": null, as a server may write an empty list.
                                self.begin_value();
                            }
                            _ => return Err(bad("items is not an array")),
                        }
                    } else {
                        self.begin_value();
                    }
                }
                At::InValue { start } => {
                    if let Some(end) = self.value_end() {
                        let bytes = &self.buf[start..end];
                        if self.field == Field::Metadata {
                            self.metadata = Some(
                                from_bytes(bytes, Decoding::default())
                                    .map_err(|e| bad(format!("metadata: {e}")))?,
                            );
                        } else if self.field == Field::Items && bytes != b"null" {
                            return Err(bad("items is not an array"));
                        }
                        self.consume(end);
                        self.at = At::Key;
                    }
                }
                At::Item => match b {
                    b',' => self.pos += 1,
                    b']' => {
                        self.pos += 1;
                        self.consume(self.pos);
                        self.at = At::Key;
                    }
                    b'{' => {
                        self.at = At::InItem { start: self.pos };
                        self.depth = 0;
                        self.in_string = false;
                        self.escaped = false;
                        self.scalar = None;
                    }
                    _ => return Err(bad("an item is not an object")),
                },
                At::InItem { start } => {
                    if let Some(end) = self.value_end() {
                        let item: K = from_bytes(&self.buf[start..end], self.decoding)
                            .map_err(|e| bad(format!("item {}: {e}", self.decoded)))?;
                        self.decoded += 1;
                        self.consume(end);
                        sink.push(Arc::new(item))?;
                        self.at = At::Item;
                    }
                }
                At::End => return Err(bad("bytes after the list object")),
            }
        }
        Ok(())
    }

    /// Starts scanning a value at `pos`.
    fn begin_value(&mut self) {
        let b = self.buf[self.pos];
        self.depth = 0;
        self.in_string = false;
        self.escaped = false;
        self.scalar = match b {
            b'{' | b'[' => None,
            other => Some(other),
        };
        self.at = At::InValue { start: self.pos };
    }

    /// Scans on in the current value; where it ends, once it has.
    fn value_end(&mut self) -> Option<usize> {
        if let Some(first) = self.scalar {
            if first == b'"' {
                // A string: from its opening quote to its closing one.
                if !self.in_string {
                    self.in_string = true;
                    self.pos += 1;
                }
                return if self.skip_string() {
                    self.scalar = None;
                    Some(self.pos)
                } else {
                    None
                };
            }
            // A number, true, false or null: up to the next delimiter.
            let buf = &self.buf[..];
            while self.pos < buf.len() {
                let b = buf[self.pos];
                if b == b',' || b == b'}' || b == b']' || b.is_ascii_whitespace() {
                    self.scalar = None;
                    return Some(self.pos);
                }
                self.pos += 1;
            }
            return None;
        }
        loop {
            if self.in_string && !self.skip_string() {
                return None;
            }
            let &b = self.buf.get(self.pos)?;
            self.pos += 1;
            match b {
                b'"' => self.in_string = true,
                b'{' | b'[' => self.depth += 1,
                b'}' | b']' => {
                    self.depth -= 1;
                    if self.depth == 0 {
                        return Some(self.pos);
                    }
                }
                _ => {}
            }
        }
    }

    /// Skips on to the end of the string being scanned (`in_string`, after its opening quote):
    /// whether it ended in what is buffered (then `pos` is after its closing quote).
    fn skip_string(&mut self) -> bool {
        loop {
            if self.escaped {
                if self.pos >= self.buf.len() {
                    return false;
                }
                self.pos += 1;
                self.escaped = false;
            }
            match memchr2(b'"', b'\\', &self.buf[self.pos..]) {
                None => {
                    self.pos = self.buf.len();
                    return false;
                }
                Some(n) => {
                    self.pos += n + 1;
                    if self.buf[self.pos - 1] == b'"' {
                        self.in_string = false;
                        return true;
                    }
                    self.escaped = true;
                }
            }
        }
    }

    /// Drops the bytes before `end` (scanned and decoded).
    fn consume(&mut self, end: usize) {
        self.buf.advance(end);
        self.pos -= end;
    }
}

/// Reads a list response's body into a page, item by item as it arrives.
pub(crate) async fn list_page<K: DeserializeOwned + Send + Sync>(
    body: Body,
    decoding: Decoding,
    sink: &mut ListSink<'_, K>,
) -> Result<ListPage<K>, Error> {
    let mut scanner = ListScanner::<K>::new(decoding);
    let mut body = std::pin::pin!(chunks(body));
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| Error::Transport(Box::new(e)))?;
        scanner.push(&chunk, sink)?;
    }
    scanner.finish(sink.take_kept())
}

/// The adapter's decoding of one list response's body, as a [`KubeListerWatcher`] decodes it:
/// item by item as the body arrives, here in pieces of `chunk` bytes (at least one), each item
/// without its managed fields if `without_managed_fields`. A body that opens with protobuf's
/// `k8s\0` is read as protobuf, any other as JSON. For benchmarks and tools that time or check
/// the decoder on bytes of their own.
///
/// [`KubeListerWatcher`]: crate::KubeListerWatcher
pub fn decode_list_body<K: DeserializeOwned + Send + Sync>(
    body: &[u8],
    chunk: usize,
    without_managed_fields: bool,
) -> Result<ListPage<K>, Error> {
    let decoding = Decoding {
        skip_managed_fields: without_managed_fields,
    };
    let mut sink = ListSink::new();
    if body.starts_with(informer_protobuf::MAGIC) {
        let negotiation = crate::protobuf::Negotiation::default();
        let mut reader = crate::protobuf::ListReader::new(decoding, &negotiation);
        for piece in body.chunks(chunk.max(1)) {
            reader.push(piece, &mut sink)?;
        }
        return reader.finish(&mut sink);
    }
    let mut scanner = ListScanner::<K>::new(decoding);
    for piece in body.chunks(chunk.max(1)) {
        scanner.push(piece, &mut sink)?;
    }
    scanner.finish(sink.take_kept())
}

/// The adapter's decoding of one watch line (without its `\n`), as a [`KubeListerWatcher`]'s
/// stream decodes it: `None` for a line it skips (JSON cut short), an error for one it cannot
/// decode. For benchmarks and tools, as [`decode_list_body`].
///
/// [`KubeListerWatcher`]: crate::KubeListerWatcher
pub fn decode_watch_line<K: DeserializeOwned>(
    line: &[u8],
    without_managed_fields: bool,
) -> Option<Result<kube::api::WatchEvent<Arc<K>>, Error>> {
    let decoding = Decoding {
        skip_managed_fields: without_managed_fields,
    };
    watch_line::<K>(line, decoding).map(|event| event.map_err(error_from_kube))
}

/// The adapter's decoding of one protobuf watch frame (a `meta.v1.WatchEvent` message, without
/// its 4-byte length), as a [`KubeListerWatcher`]'s stream decodes it. For benchmarks and tools,
/// as [`decode_list_body`].
///
/// [`KubeListerWatcher`]: crate::KubeListerWatcher
pub fn decode_watch_frame<K: DeserializeOwned>(
    frame: &[u8],
    without_managed_fields: bool,
) -> Result<kube::api::WatchEvent<Arc<K>>, Error> {
    let decoding = Decoding {
        skip_managed_fields: without_managed_fields,
    };
    crate::protobuf::frame_event(frame, decoding, &crate::protobuf::Negotiation::default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use proptest::prelude::*;
    use serde_json::json;

    /// What serde_json makes of the whole body: the model.
    fn model(body: &[u8]) -> Option<(Vec<ConfigMap>, String, Option<String>)> {
        let list: kube::core::ObjectList<ConfigMap> = serde_json::from_slice(body).ok()?;
        let rv = list.metadata.resource_version.filter(|rv| !rv.is_empty())?;
        Some((
            list.items,
            rv,
            list.metadata.continue_.filter(|c| !c.is_empty()),
        ))
    }

    fn scan(body: &[u8], cuts: &[usize]) -> Result<ListPage<ConfigMap>, Error> {
        let mut scanner = ListScanner::<ConfigMap>::default();
        let mut sink = ListSink::new();
        let mut at = 0;
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (body.len() + 1)).collect();
        cuts.sort_unstable();
        for cut in cuts.into_iter().chain([body.len()]) {
            scanner.push(&body[at..cut], &mut sink)?;
            at = cut;
        }
        scanner.finish(sink.take_kept())
    }

    fn text() -> impl Strategy<Value = String> {
        // Quotes, backslashes, braces and brackets inside strings, and non-ASCII.
        proptest::string::string_regex(r#"[a-z0-9"\\{}\[\],: é✓\n]{0,12}"#).expect("a regex")
    }

    fn body() -> impl Strategy<Value = Vec<u8>> {
        (
            proptest::collection::vec(
                (text(), proptest::collection::btree_map(text(), text(), 0..3)),
                0..6,
            ),
            1u32..1000,
            proptest::option::of(text()),
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(|(items, rv, cont, metadata_last, pretty)| {
                let items: Vec<_> = items
                    .into_iter()
                    .enumerate()
                    .map(|(i, (name, data))| {
                        json!({
                            "metadata": {"name": format!("{name}-{i}"), "resourceVersion": i.to_string()},
                            "data": data,
                        })
                    })
                    .collect();
                let mut metadata = json!({ "resourceVersion": rv.to_string() });
                if let Some(c) = cont {
                    metadata["continue"] = json!(c);
                }
                let extra = json!({"nested": [1, {"a": "]}"}], "n": -1.5e3, "t": true, "z": null});
                let mut out = String::from("{\"kind\":\"ConfigMapList\",\"extra\":");
                out.push_str(&extra.to_string());
                let meta = format!(",\"metadata\":{metadata}");
                if !metadata_last {
                    out.push_str(&meta);
                }
                let items = if pretty {
                    serde_json::to_string_pretty(&items).expect("encodes")
                } else {
                    serde_json::to_string(&items).expect("encodes")
                };
                out.push_str(&format!(",\"items\": {items} "));
                if metadata_last {
                    out.push_str(&meta);
                }
                out.push_str(",\"apiVersion\":\"v1\",\"count\":7}\n");
                out.into_bytes()
            })
    }

    proptest! {
        /// Any list, cut into chunks anywhere, decodes as serde_json decodes it whole.
        #[test]
        fn a_list_cut_anywhere_decodes_as_a_whole(
            body in body(),
            cuts in proptest::collection::vec(any::<usize>(), 0..8),
        ) {
            let (items, rv, cont) = model(&body).expect("the generated list is valid");
            let page = scan(&body, &cuts).expect("decodes");
            let got: Vec<ConfigMap> = page.items.iter().map(|i| (**i).clone()).collect();
            prop_assert_eq!(got, items);
            prop_assert_eq!(page.resource_version, rv);
            prop_assert_eq!(page.continue_token, cont);
        }

        /// A list cut short is an error, never a page of what came so far.
        #[test]
        fn a_list_cut_short_is_an_error(body in body(), end in any::<usize>()) {
            let trimmed = body.trim_ascii_end();
            let end = end % trimmed.len();
            prop_assert!(scan(&trimmed[..end], &[]).is_err());
        }

        /// Arbitrary bytes never panic, and whatever the scanner accepts, serde_json accepts
        /// too, with the same items.
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Ok(page) = scan(&bytes, &[7, 31]) {
                let (items, rv, _) = model(&bytes).expect("serde_json accepts it too");
                let got: Vec<ConfigMap> = page.items.iter().map(|i| (**i).clone()).collect();
                prop_assert_eq!(got, items);
                prop_assert_eq!(page.resource_version, rv);
            }
        }
    }

    #[test]
    fn null_items_and_an_empty_list_are_empty_pages() {
        for body in [
            &br#"{"metadata":{"resourceVersion":"5"},"items":null}"#[..],
            br#"{"metadata":{"resourceVersion":"5"},"items":[]}"#,
            br#"{"kind":"ConfigMapList","metadata":{"resourceVersion":"5"}}"#,
        ] {
            let page = scan(body, &[3]).expect("decodes");
            assert!(page.items.is_empty());
            assert_eq!(page.resource_version, "5");
        }
    }

    #[test]
    fn a_list_without_a_resource_version_or_with_a_bad_item_is_an_error() {
        assert!(scan(br#"{"items":[]}"#, &[]).is_err());
        assert!(
            scan(
                br#"{"metadata":{"resourceVersion":"5"},"items":[{"data":7}]}"#,
                &[]
            )
            .is_err()
        );
        assert!(scan(br#"{"metadata":{"resourceVersion":"5"},"items":[1]}"#, &[]).is_err());
        assert!(scan(br#"[]"#, &[]).is_err());
    }

    #[test]
    fn lines_split_across_chunks_and_whole_ones_come_out_in_order() {
        let mut lines = Lines::default();
        let mut out = Vec::new();
        lines.push(Bytes::from_static(b"a\nb"), &mut out);
        lines.push(Bytes::from_static(b"c\n\nd"), &mut out);
        lines.push(Bytes::from_static(b"e"), &mut out);
        assert_eq!(out, [&b"a"[..], b"bc", b""]);
        assert_eq!(lines.finish().as_deref(), Some(&b"de"[..]));
        assert_eq!(lines.finish(), None);
    }

    #[test]
    fn the_public_decoders_decode_as_the_adapter_does() {
        let body = json!({
            "kind": "ConfigMapList", "apiVersion": "v1",
            "metadata": {"resourceVersion": "12", "continue": "next"},
            "items": [
                {"metadata": {"name": "a", "resourceVersion": "3",
                    "managedFields": [{"manager": "kubectl"}]}, "data": {"k": "v"}},
                {"metadata": {"name": "b", "resourceVersion": "4"}},
            ],
        })
        .to_string();
        let (items, rv, token) = model(body.as_bytes()).expect("the model decodes it");
        for chunk in [0, 1, 7, body.len()] {
            let page = decode_list_body::<ConfigMap>(body.as_bytes(), chunk, false).unwrap();
            let got: Vec<ConfigMap> = page.items.iter().map(|o| (**o).clone()).collect();
            assert_eq!(got, items, "pieces of {chunk}");
            assert_eq!(
                (page.resource_version, page.continue_token),
                (rv.clone(), token.clone())
            );
        }
        let page = decode_list_body::<ConfigMap>(body.as_bytes(), 64, true).unwrap();
        assert!(
            page.items
                .iter()
                .all(|o| o.metadata.managed_fields.is_none())
        );
        assert!(decode_list_body::<ConfigMap>(&body.as_bytes()[..40], 8, false).is_err());

        let line = json!({"type": "MODIFIED", "object": {"metadata": {"name": "a",
            "resourceVersion": "5", "managedFields": [{"manager": "kubectl"}]}}})
        .to_string();
        for without in [false, true] {
            match decode_watch_line::<ConfigMap>(line.as_bytes(), without) {
                Some(Ok(kube::api::WatchEvent::Modified(o))) => {
                    assert_eq!(o.metadata.name.as_deref(), Some("a"));
                    assert_eq!(o.metadata.managed_fields.is_none(), without);
                }
                other => panic!("expected MODIFIED, got {other:?}"),
            }
        }
        assert!(decode_watch_line::<ConfigMap>(&line.as_bytes()[..20], false).is_none());
        assert!(matches!(
            decode_watch_line::<ConfigMap>(b"{\"type\": 3}", false),
            Some(Err(_))
        ));
    }
}
