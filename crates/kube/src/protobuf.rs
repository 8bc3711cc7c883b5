//! Protobuf responses (`application/vnd.kubernetes.protobuf`), read by `informer-protobuf`
//! straight into the object types.
//!
//! A built-in type of k8s-openapi (`Pod`, `Deployment`, …) is read by the decoder generated for
//! it, which writes each field in place as it comes off the wire; managed fields that the
//! lister-watcher leaves out are walked over without being built. Any other type (a projection
//! of a built-in type, a type of the application's own) is read through its `Deserialize`, by
//! the serde path of the same crate. Both read the same object from the same bytes ([`Objects`]).
//!
//! A lister-watcher asks for protobuf with JSON as the acceptable fallback; the server answers
//! protobuf for the built-in types and JSON for the rest (custom resources), and each response
//! is read as its `Content-Type` says. A built-in type newer than the protobuf schema this
//! crate carries (a field number it does not know) makes that lister-watcher ask for JSON from
//! then on: the failed request is an error the reflector retries, the next one is JSON, and
//! nothing is read wrong.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};

use futures::{FutureExt, Stream, StreamExt};
use informer_protobuf::{
    DecodeOptions, Envelope, FrameDecoder, Generated, ListDecoder, MessageType, envelope,
};
use informer_reflector::{Error, ListPage, ListSink};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta;
use kube::client::Body;
use serde::Deserialize;
use serde::de::DeserializeOwned;

use crate::decode::{Decoding, InArc, chunks};
use crate::skip::WithoutManagedFields;

/// What a lister-watcher asks for when protobuf is on.
pub(crate) const ACCEPT: &str = "application/vnd.kubernetes.protobuf, application/json";

/// The encoding of a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Encoding {
    /// `application/json`.
    Json,
    /// `application/vnd.kubernetes.protobuf`.
    Protobuf,
}

impl Encoding {
    /// `json` or `protobuf`.
    pub fn as_str(self) -> &'static str {
        match self {
            Encoding::Json => "json",
            Encoding::Protobuf => "protobuf",
        }
    }
}

/// One lister-watcher's choice of encoding, shared by its clones: whether it asks for
/// protobuf, and what its responses were.
#[derive(Debug, Default)]
pub(crate) struct Negotiation {
    /// Protobuf was turned off (by the user) or given up (a schema gap).
    json_only: AtomicBool,
    json: AtomicU64,
    protobuf: AtomicU64,
    gaps: AtomicU64,
    /// The encoding of the last response: [`JSON`] or [`PROTOBUF`]; 0 before any.
    last: AtomicU8,
}

/// [`Negotiation::last`] after a JSON response.
const JSON: u8 = 1;
/// [`Negotiation::last`] after a protobuf response.
const PROTOBUF: u8 = 2;

impl Negotiation {
    pub(crate) fn json_only() -> Self {
        let negotiation = Self::default();
        negotiation.json_only.store(true, Ordering::Relaxed);
        negotiation
    }

    /// Whether the next request asks for protobuf.
    pub(crate) fn asks_protobuf(&self) -> bool {
        !self.json_only.load(Ordering::Relaxed)
    }

    pub(crate) fn record(&self, encoding: Encoding) {
        let (count, last) = match encoding {
            Encoding::Json => (&self.json, JSON),
            Encoding::Protobuf => (&self.protobuf, PROTOBUF),
        };
        count.fetch_add(1, Ordering::Relaxed);
        self.last.store(last, Ordering::Relaxed);
    }

    /// The encoding of the last response read, if any.
    pub(crate) fn last(&self) -> Option<Encoding> {
        match self.last.load(Ordering::Relaxed) {
            JSON => Some(Encoding::Json),
            PROTOBUF => Some(Encoding::Protobuf),
            _ => None,
        }
    }

    /// Responses read so far: `(json, protobuf)`, and the schema gaps that turned protobuf off.
    pub(crate) fn counts(&self) -> EncodingCounts {
        EncodingCounts {
            json: self.json.load(Ordering::Relaxed),
            protobuf: self.protobuf.load(Ordering::Relaxed),
            schema_gaps: self.gaps.load(Ordering::Relaxed),
        }
    }

    /// The reflector's error for a protobuf failure; a schema gap turns protobuf off first.
    pub(crate) fn error(&self, what: &str, err: informer_protobuf::Error) -> Error {
        use informer_protobuf::Error as Pb;
        if matches!(err, Pb::UnknownField { .. } | Pb::UnknownKind { .. })
            && !self.json_only.swap(true, Ordering::Relaxed)
        {
            self.gaps.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(error = %err, "protobuf schema gap: reading JSON from now on");
        }
        Error::Decode {
            message: format!("{what}: {err}"),
            source: Some(Box::new(err)),
        }
    }
}

/// How many responses of each encoding a lister-watcher read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EncodingCounts {
    /// JSON responses (lists and watches).
    pub json: u64,
    /// Protobuf responses.
    pub protobuf: u64,
    /// Times protobuf was given up for JSON: a built-in type newer than this crate's schema.
    pub schema_gaps: u64,
}

/// Where an object's bytes are: an enveloped object (a watch event's) or a bare message (a list
/// item).
enum Source<'a> {
    Envelope(&'a Envelope<'a>),
    Message(MessageType, &'a [u8]),
}

impl<'a> Source<'a> {
    fn decode<T: Deserialize<'a>>(&self) -> Result<T, informer_protobuf::Error> {
        match self {
            Source::Envelope(envelope) => envelope.decode(),
            Source::Message(message, bytes) => message.decode(bytes),
        }
    }
}

/// How the objects of one response are read: by `K`'s generated decoder when `K` is a built-in
/// type of k8s-openapi ([`Generated`], looked up once per response), through serde otherwise (a
/// projection, a type of the application's own); whole, or without their managed fields, as
/// the lister-watcher's [`Decoding`] says. Both read the same object from the same bytes, and
/// fail alike on bad ones.
pub(crate) struct Objects<K> {
    generated: Option<Generated<K>>,
    decoding: Decoding,
}

impl<K> Clone for Objects<K> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K> Copy for Objects<K> {}

impl<K: DeserializeOwned + Send + Sync + 'static> Objects<K> {
    pub(crate) fn new(decoding: Decoding) -> Self {
        Self {
            generated: Generated::find(),
            decoding,
        }
    }

    /// The object at `source`, in its `Arc`.
    fn read(&self, source: Source<'_>) -> Result<Arc<K>, informer_protobuf::Error> {
        let skip = self.decoding.skip_managed_fields;
        if let Some(generated) = &self.generated {
            let options = if skip {
                DecodeOptions::new().without_managed_fields()
            } else {
                DecodeOptions::new()
            };
            return match source {
                Source::Envelope(envelope) => generated.decode_envelope(envelope, options),
                Source::Message(message, bytes) => {
                    generated.decode_message(message, bytes, options)
                }
            };
        }
        if skip {
            source
                .decode::<WithoutManagedFields<InArc<K>>>()
                .map(|o| o.0.0)
        } else {
            source.decode::<InArc<K>>().map(|o| o.0)
        }
    }
}

/// Reads a protobuf list response into a page, item by item as its bytes arrive.
pub(crate) async fn list_page<K: DeserializeOwned + Send + Sync + 'static>(
    body: Body,
    decoding: Decoding,
    negotiation: &Negotiation,
    sink: &mut ListSink<'_, K>,
) -> Result<ListPage<K>, Error> {
    list_page_of_chunks(chunks(body), decoding, negotiation, sink).await
}

/// [`list_page`] of a body's `chunks`.
async fn list_page_of_chunks<K: DeserializeOwned + Send + Sync + 'static>(
    chunks: impl Stream<Item = Result<bytes::Bytes, std::io::Error>>,
    decoding: Decoding,
    negotiation: &Negotiation,
    sink: &mut ListSink<'_, K>,
) -> Result<ListPage<K>, Error> {
    let mut reader = ListReader::new(Objects::new(decoding), negotiation);
    let mut body = std::pin::pin!(chunks.fuse());
    while let Some(chunk) = body.next().await {
        let mut failed = None;
        match chunk {
            Ok(chunk) => {
                reader.add(&chunk);
                // The chunks already here join it, to be decoded together.
                let mut gathered = chunk.len();
                while gathered < crate::parallel::GATHER_AT_MOST {
                    match body.next().now_or_never() {
                        Some(Some(Ok(chunk))) => {
                            gathered += chunk.len();
                            reader.add(&chunk);
                        }
                        Some(Some(Err(e))) => {
                            failed = Some(e);
                            break;
                        }
                        Some(None) | None => break,
                    }
                }
            }
            Err(e) => failed = Some(e),
        }
        reader.decode_complete(sink)?;
        if let Some(e) = failed {
            return Err(Error::Transport(Box::new(e)));
        }
        sink.ready().await;
    }
    reader.finish(sink)
}

/// A protobuf list body's items decoded as its chunks come ([`list_page`]): the items the
/// chunks taken together complete, decoded together, on several threads when there are enough
/// bytes of them ([`crate::parallel`]).
pub(crate) struct ListReader<'n, K> {
    decoder: ListDecoder,
    objects: Objects<K>,
    negotiation: &'n Negotiation,
    decoded: usize,
    /// The complete items of the chunks taken last, where they are in `decoder`.
    items: Vec<(std::ops::Range<usize>, MessageType)>,
}

impl<'n, K: DeserializeOwned + Send + Sync + 'static> ListReader<'n, K> {
    pub(crate) fn new(objects: Objects<K>, negotiation: &'n Negotiation) -> Self {
        Self {
            decoder: ListDecoder::default(),
            objects,
            negotiation,
            decoded: 0,
            items: Vec::new(),
        }
    }

    /// Takes a chunk, decoding every item it completes into `sink`, in their order. A body
    /// that goes wrong after some complete items fails once those are in `sink`, as item by
    /// item.
    pub(crate) fn push(&mut self, chunk: &[u8], sink: &mut ListSink<'_, K>) -> Result<(), Error> {
        self.add(chunk);
        self.decode_complete(sink)
    }

    /// Takes a chunk, to be decoded with the next [`decode_complete`](Self::decode_complete).
    pub(crate) fn add(&mut self, chunk: &[u8]) {
        self.decoder.push(chunk);
    }

    /// Decodes every item the chunks taken so far complete into `sink`, in their order,
    /// together ([`crate::parallel`]). A body that goes wrong after some complete items fails
    /// once those are in `sink`, as item by item.
    pub(crate) fn decode_complete(&mut self, sink: &mut ListSink<'_, K>) -> Result<(), Error> {
        self.items.clear();
        let mut bytes = 0;
        let body = loop {
            match self.decoder.next_item_at() {
                Ok(Some((at, message))) => {
                    bytes += at.len();
                    self.items.push((at, message));
                }
                Ok(None) => break Ok(()),
                Err(e) => break Err(self.negotiation.error("list response", e)),
            }
        };
        let (decoder, objects) = (&self.decoder, self.objects);
        let decoded = crate::parallel::decode_all(
            &self.items,
            bytes,
            objects.decoding.parallel_from,
            |(at, message)| objects.read(Source::Message(*message, decoder.bytes(at.clone()))),
        );
        for item in decoded {
            let item = item.map_err(|e| {
                let what = format!("list response: item {}", self.decoded);
                self.negotiation.error(&what, e)
            })?;
            self.decoded += 1;
            sink.push(item)?;
        }
        body
    }

    /// The page, once the body has ended.
    pub(crate) fn finish(self, sink: &mut ListSink<'_, K>) -> Result<ListPage<K>, Error> {
        let failed = |e| self.negotiation.error("list response", e);
        let shard_info = self.decoder.shard_info().map_err(failed)?;
        let metadata: ListMeta = self.decoder.finish().map_err(failed)?;
        let resource_version = metadata
            .resource_version
            .filter(|rv| !rv.is_empty())
            .ok_or_else(|| Error::decode("list response without metadata.resourceVersion"))?;
        let mut page = ListPage::new(sink.take_kept(), resource_version);
        page.continue_token = metadata.continue_.filter(|c| !c.is_empty());
        page.shard_info = shard_info;
        Ok(page)
    }
}

/// A bookmark's object: only its metadata is read.
#[derive(Deserialize)]
struct BookmarkObject {
    metadata: kube::core::watch::BookmarkMeta,
}

/// One watch frame as kube-client's watch event.
pub(crate) fn frame_event<K: DeserializeOwned + Send + Sync + 'static>(
    frame: &[u8],
    objects: Objects<K>,
    negotiation: &Negotiation,
) -> Result<kube::api::WatchEvent<Arc<K>>, Error> {
    use kube::api::WatchEvent as E;
    let failed = |e| negotiation.error("watch event", e);
    let event = informer_protobuf::watch_event(frame).map_err(failed)?;
    let envelope = envelope::open(event.object).map_err(failed)?;
    let object = || objects.read(Source::Envelope(&envelope)).map_err(failed);
    Ok(match event.event_type {
        "ADDED" => E::Added(object()?),
        "MODIFIED" => E::Modified(object()?),
        "DELETED" => E::Deleted(object()?),
        "BOOKMARK" => {
            let bookmark: BookmarkObject = envelope.decode().map_err(failed)?;
            E::Bookmark(kube::core::watch::Bookmark {
                types: kube::core::TypeMeta {
                    api_version: envelope.api_version.to_owned(),
                    kind: envelope.kind.to_owned(),
                },
                metadata: bookmark.metadata,
            })
        }
        "ERROR" => E::Error(Box::new(envelope.decode().map_err(failed)?)),
        other => {
            return Err(Error::decode(format!(
                "watch event of unknown type {other:?}"
            )));
        }
    })
}

/// The watch events of a protobuf body: its frames, each decoded as it completes. A body cut
/// inside a frame ends the stream quietly, to be resumed, as a torn JSON line does.
///
/// The chunks that have arrived are taken together, and frames they complete in numbers (the
/// initial events of a streaming list, a burst of changes) are decoded together on several
/// threads when there are enough bytes of them ([`crate::parallel`]). Meanwhile the events
/// decoded before them are handed on and the next chunks are read, up to
/// [`GATHER_AT_MOST`](crate::parallel::GATHER_AT_MOST) bytes of complete frames waiting, with
/// up to [`ON_POOL`] batches on the threads, so that the threads go from one batch to the
/// next without waiting for this stream's reader; the pool and the body are looked at every
/// [`LOOK_EVERY`] events handed on, not at each. A frame that comes alone is decoded when it
/// is read.
///
/// A `Stream` of its own rather than a combinator chain: a streaming list reads one event per
/// object, so what each event costs beyond its object's decoding (a future built per item,
/// an `Arc` cloned per item) is paid tens of thousands of times per sync.
pub(crate) struct WatchFrames<K> {
    body: futures::stream::BoxStream<'static, Result<bytes::Bytes, std::io::Error>>,
    frames: FrameDecoder,
    /// The complete frames read and not decoded yet, where they are in `frames`; they come
    /// after those on the pool.
    complete: VecDeque<std::ops::Range<usize>>,
    /// The bytes of `complete`'s frames.
    complete_bytes: usize,
    /// Frames being decoded on the pool, in their order, after `decoded`.
    on_pool: VecDeque<crate::parallel::Batch<WatchFramesItem<K>, Vec<u8>>>,
    /// The buffer of a batch decoded, for the frames read next.
    spare: Vec<u8>,
    /// Frames decoded together, to be handed on; up to the first that failed.
    decoded: Decoded<WatchFramesItem<K>>,
    /// Events handed on from `decoded` since the pool and the body were last looked at.
    handed_on_quietly: usize,
    /// What went wrong after the complete frames read: the stream's last item.
    broken: Option<Error>,
    /// The body has ended (or was cut short, or a frame failed): nothing more is read, and the
    /// stream ends once what came is handed on.
    body_ended: bool,
    objects: Objects<K>,
    negotiation: Arc<Negotiation>,
    ended: bool,
}

/// How many batches of a watch's frames may be on the pool at once: the threads take the
/// second as soon as they are done with the first.
const ON_POOL: usize = 2;

type WatchFramesItem<K> = Result<kube::api::WatchEvent<Arc<K>>, Error>;

/// How many events decoded before a [`WatchFrames`] hands on between two looks at its pool
/// and its body: a batch on the pool takes hundreds of events' time to decode, so a look every
/// 32 events keeps the pool fed while most events are handed on without one.
const LOOK_EVERY: usize = 32;

/// Batches of decoded events, in their order: each kept as it came from the pool, not copied
/// into one queue.
struct Decoded<T>(VecDeque<std::vec::IntoIter<T>>);

impl<T> Default for Decoded<T> {
    fn default() -> Self {
        Self(VecDeque::new())
    }
}

impl<T> Decoded<T> {
    fn push(&mut self, batch: Vec<T>) {
        if !batch.is_empty() {
            self.0.push_back(batch.into_iter());
        }
    }

    /// How many events are left.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.0.iter().map(ExactSizeIterator::len).sum()
    }

    fn pop_front(&mut self) -> Option<T> {
        loop {
            let front = self.0.front_mut()?;
            match front.next() {
                Some(event) => return Some(event),
                None => {
                    self.0.pop_front();
                }
            }
        }
    }
}

impl<K: DeserializeOwned + Send + Sync + 'static> WatchFrames<K> {
    pub(crate) fn new(body: Body, decoding: Decoding, negotiation: Arc<Negotiation>) -> Self {
        Self::of_chunks(chunks(body).boxed(), decoding, negotiation)
    }

    /// The watch events of a body's `chunks`.
    fn of_chunks(
        chunks: futures::stream::BoxStream<'static, Result<bytes::Bytes, std::io::Error>>,
        decoding: Decoding,
        negotiation: Arc<Negotiation>,
    ) -> Self {
        Self {
            body: chunks,
            frames: FrameDecoder::default(),
            complete: VecDeque::new(),
            complete_bytes: 0,
            on_pool: VecDeque::new(),
            spare: Vec::new(),
            decoded: Decoded::default(),
            handed_on_quietly: 0,
            broken: None,
            body_ended: false,
            objects: Objects::new(decoding),
            negotiation,
            ended: false,
        }
    }

    /// Reads the chunks already here while fewer than
    /// [`GATHER_AT_MOST`](crate::parallel::GATHER_AT_MOST) bytes and
    /// [`FRAMES_AT_MOST`](crate::parallel::FRAMES_AT_MOST) complete frames wait, and finds the
    /// frames they complete. Whether it stopped at a bound (rather than waiting for the body,
    /// or at its end): then there may be more to read at once.
    fn read_ahead(&mut self, cx: &mut std::task::Context<'_>) -> bool {
        use std::task::Poll;
        loop {
            self.find_frames();
            if self.complete_bytes >= crate::parallel::GATHER_AT_MOST
                || self.complete.len() >= crate::parallel::FRAMES_AT_MOST
            {
                break true;
            }
            if self.body_ended {
                break false;
            }
            let chunk = match self.body.poll_next_unpin(cx) {
                Poll::Ready(chunk) => chunk,
                Poll::Pending => break false,
            };
            match chunk {
                Some(Ok(chunk)) => {
                    // The complete frames' positions stay valid.
                    if self.complete.is_empty() {
                        self.frames.push(&chunk);
                    } else {
                        self.frames.append(&chunk);
                    }
                    continue;
                }
                Some(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                    tracing::debug!("watch body cut short: {e}");
                }
                Some(Err(e)) => self.broken = Some(Error::Transport(Box::new(e))),
                None => {
                    if self.frames.pending() > 0 {
                        tracing::debug!(
                            bytes = self.frames.pending(),
                            "watch body ended inside a frame"
                        );
                    }
                }
            }
            self.body_ended = true;
        }
    }

    /// Finds the frames the chunks read complete.
    fn find_frames(&mut self) {
        loop {
            match self.frames.next_frame_at() {
                Ok(Some(at)) => {
                    self.complete_bytes += at.len();
                    self.complete.push_back(at);
                }
                Ok(None) => break,
                Err(e) => {
                    self.broken = Some(self.negotiation.error("watch stream", e));
                    self.body_ended = true;
                    break;
                }
            }
        }
    }

    /// Sends the complete frames to the pool when there are enough bytes of them and room.
    fn send_to_pool(&mut self) {
        let from = self.objects.decoding.parallel_from;
        if self.on_pool.len() >= ON_POOL
            || self.complete.len() < 2
            || self.complete_bytes < from
            || !crate::parallel::available()
        {
            return;
        }
        let frames: Vec<_> = self.complete.drain(..).collect();
        self.complete_bytes = 0;
        let (objects, negotiation) = (self.objects, self.negotiation.clone());
        let read = self.frames.take_read(std::mem::take(&mut self.spare));
        let batch = crate::parallel::spawn(read, frames, move |bytes, at| {
            frame_event(&bytes[at.clone()], objects, &negotiation)
        });
        self.on_pool.extend(batch);
    }

    /// Takes the events of a batch decoded on the pool. The stream ends at a frame that cannot
    /// be read: nothing after it is read, decoded or handed on.
    fn take_decoded(&mut self, decoded: Result<(Vec<WatchFramesItem<K>>, Vec<u8>), String>) {
        let mut decoded = match decoded {
            Ok((decoded, buffer)) => {
                self.spare = buffer;
                decoded
            }
            Err(panic) => vec![Err(Error::decode(format!(
                "watch event: decoding failed: {panic}"
            )))],
        };
        if let Some(failed) = decoded.iter().position(Result::is_err) {
            // Nothing after the frame that failed is handed on.
            decoded.truncate(failed + 1);
            self.on_pool.clear();
            self.complete.clear();
            self.complete_bytes = 0;
            self.broken = None;
            self.body_ended = true;
        }
        self.decoded.push(decoded);
    }
}

impl<K: DeserializeOwned + Send + Sync + 'static> Stream for WatchFrames<K> {
    type Item = WatchFramesItem<K>;

    fn poll_next(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        use std::task::Poll;
        let this = self.get_mut();
        // Most events come from a batch decoded before: handed on at once, the pool and the
        // body looked at only every `LOOK_EVERY` events (and whenever none is decoded), so
        // that an event costs no poll of the body or of the batch being decoded.
        if !this.ended
            && this.handed_on_quietly < LOOK_EVERY
            && let Some(event) = this.decoded.pop_front()
        {
            this.handed_on_quietly += 1;
            this.ended = event.is_err();
            return Poll::Ready(Some(event));
        }
        this.handed_on_quietly = 0;
        while !this.ended {
            if let Some(batch) = this.on_pool.front_mut()
                && let Poll::Ready(decoded) = batch.poll_unpin(cx)
            {
                this.on_pool.pop_front();
                this.take_decoded(decoded);
            }
            let more_now = !this.body_ended && this.read_ahead(cx);
            this.send_to_pool();
            let next = match (this.decoded.pop_front(), this.on_pool.front_mut()) {
                (Some(event), _) => Some(event),
                // Its events come next: wait for them (a batch just sent is polled here first).
                (None, Some(batch)) => match batch.poll_unpin(cx) {
                    Poll::Ready(decoded) => {
                        this.on_pool.pop_front();
                        this.take_decoded(decoded);
                        continue;
                    }
                    Poll::Pending => return Poll::Pending,
                },
                (None, None) => this.complete.pop_front().map(|at| {
                    this.complete_bytes -= at.len();
                    frame_event(this.frames.bytes(at), this.objects, &this.negotiation)
                }),
            };
            if let Some(event) = next {
                // An event that cannot be read ends the stream (the reflector watches again,
                // or relists).
                this.ended = event.is_err();
                return Poll::Ready(Some(event));
            }
            if let Some(err) = this.broken.take() {
                this.ended = true;
                return Poll::Ready(Some(Err(err)));
            }
            if this.body_ended {
                this.ended = true;
                break;
            }
            if !more_now {
                // Waiting for the body, which wakes this task.
                return Poll::Pending;
            }
        }
        Poll::Ready(None)
    }
}

/// A protobuf `Status` body (an error response), if it is one.
pub(crate) fn status(body: &[u8]) -> Option<kube::core::Status> {
    informer_protobuf::from_slice(body).ok()
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::{Value, json};

    use super::*;

    /// Pod `i`, with a label, an annotation and a container.
    fn pod(i: usize) -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": format!("pod-{i}"), "namespace": "default",
                "resourceVersion": (100 + i).to_string(), "uid": format!("uid-{i}"),
                "labels": {"app": format!("app-{}", i % 7)},
                "annotations": {"note": "x".repeat(i % 50)},
            },
            "spec": {"nodeName": format!("node-{}", i % 3),
                "containers": [{"name": "c", "image": format!("image:{i}")}]},
        })
    }

    /// A protobuf list body of `n` pods.
    fn list_body(n: usize) -> Vec<u8> {
        let items: Vec<Value> = (0..n).map(pod).collect();
        let list = json!({
            "apiVersion": "v1", "kind": "PodList",
            "metadata": {"resourceVersion": "999", "continue": "more"}, "items": items,
        });
        informer_apiserver::encode_protobuf(&list).expect("a PodList encodes")
    }

    /// Decoding whose protobuf chunks go to the pool from `parallel_from` bytes.
    fn decoding(parallel_from: usize) -> Decoding {
        Decoding {
            parallel_from,
            ..Decoding::default()
        }
    }

    /// `body` read by a [`ListReader`] in chunks of `chunk` bytes: the objects the sink kept
    /// and the page, or the error and the objects kept before it.
    fn read_list(
        body: &[u8],
        chunk: usize,
        parallel_from: usize,
    ) -> (Vec<Arc<Pod>>, Result<ListPage<Pod>, String>) {
        let negotiation = Negotiation::default();
        let mut reader = ListReader::new(Objects::new(decoding(parallel_from)), &negotiation);
        let mut sink = ListSink::new();
        for piece in body.chunks(chunk) {
            if let Err(e) = reader.push(piece, &mut sink) {
                return (sink.take_kept(), Err(e.to_string()));
            }
        }
        let mut page = reader.finish(&mut sink).map_err(|e| e.to_string());
        let kept = match &mut page {
            Ok(page) => std::mem::take(&mut page.items),
            Err(_) => sink.take_kept(),
        };
        (kept, page)
    }

    #[test]
    fn a_list_decoded_on_the_pool_is_the_list_decoded_on_one_thread() {
        let body = list_body(300);
        let (serial, page) = read_list(&body, body.len(), usize::MAX);
        let page = page.expect("the list decodes");
        assert_eq!(serial.len(), 300);
        assert_eq!(serial[299].metadata.name.as_deref(), Some("pod-299"));
        assert_eq!(page.resource_version, "999");
        assert_eq!(page.continue_token.as_deref(), Some("more"));
        // Whole, in chunks that end inside items, in chunks of about one item: on the pool
        // wherever a chunk completes two items or more.
        for chunk in [body.len(), 64 * 1024, 4096, 300] {
            let (pooled, pooled_page) = read_list(&body, chunk, 0);
            let pooled_page = pooled_page.expect("the list decodes");
            assert_eq!(pooled, serial, "chunks of {chunk} bytes");
            assert_eq!(pooled_page.resource_version, page.resource_version);
            assert_eq!(pooled_page.continue_token, page.continue_token);
        }
    }

    /// `body` with the item `index` made undecodable (its first field's key given wire type 7,
    /// which protobuf does not have).
    fn with_bad_item(body: &[u8], index: usize) -> Vec<u8> {
        let mut decoder = ListDecoder::default();
        decoder.push(body);
        let mut at = None;
        for _ in 0..=index {
            at = decoder.next_item_at().expect("a list").map(|(at, _)| at);
        }
        let at = at.expect("the item is there");
        let mut bad = body.to_vec();
        bad[at.start] = 0x0f;
        bad
    }

    #[test]
    fn a_bad_item_fails_the_list_at_that_item_on_the_pool_as_on_one_thread() {
        let body = with_bad_item(&list_body(200), 137);
        let (serial_kept, serial) = read_list(&body, body.len(), usize::MAX);
        let serial = serial.expect_err("item 137 cannot be read");
        assert!(serial.contains("item 137"), "{serial}");
        assert_eq!(serial_kept.len(), 137, "the items before it are handed on");
        for chunk in [body.len(), 16 * 1024] {
            let (kept, pooled) = read_list(&body, chunk, 0);
            assert_eq!(pooled.expect_err("item 137 cannot be read"), serial);
            assert_eq!(kept, serial_kept, "chunks of {chunk} bytes");
        }
    }

    /// Every event of a watch body read whole, as type, object name and resource version, then
    /// the error that ended it, if one did.
    async fn read_watch(body: Vec<u8>, parallel_from: usize) -> (Vec<String>, Option<String>) {
        let mut frames = WatchFrames::<Pod>::new(
            Body::from(body),
            decoding(parallel_from),
            Arc::new(Negotiation::default()),
        );
        let mut events = Vec::new();
        while let Some(event) = frames.next().await {
            use kube::api::WatchEvent as E;
            let (kind, pod) = match event {
                Ok(E::Added(p)) => ("ADDED", p),
                Ok(E::Modified(p)) => ("MODIFIED", p),
                Ok(E::Deleted(p)) => ("DELETED", p),
                Ok(other) => {
                    events.push(format!("{other:?}"));
                    continue;
                }
                Err(e) => {
                    assert!(frames.next().await.is_none(), "nothing after an error");
                    return (events, Some(e.to_string()));
                }
            };
            let meta = &pod.metadata;
            events.push(format!(
                "{kind} {} {}",
                meta.name.as_deref().unwrap_or_default(),
                meta.resource_version.as_deref().unwrap_or_default()
            ));
        }
        (events, None)
    }

    fn frames(range: std::ops::Range<usize>) -> Vec<u8> {
        range
            .flat_map(|i| {
                let kind = ["ADDED", "MODIFIED", "DELETED"][i % 3];
                informer_apiserver::protobuf_watch_frame(kind, &pod(i)).expect("a frame")
            })
            .collect()
    }

    /// `body` in chunks of `chunk` bytes, every one there at once, then `end` (an error) if
    /// given.
    fn in_chunks(
        body: &[u8],
        chunk: usize,
        end: Option<std::io::ErrorKind>,
    ) -> futures::stream::BoxStream<'static, Result<bytes::Bytes, std::io::Error>> {
        let mut pieces: Vec<_> = body
            .chunks(chunk)
            .map(|c| Ok(bytes::Bytes::copy_from_slice(c)))
            .collect();
        pieces.extend(end.map(|kind| Err(std::io::Error::new(kind, "the connection broke"))));
        futures::stream::iter(pieces).boxed()
    }

    /// What [`list_page`] reads of `body` in chunks of `chunk` bytes, then `end`: the objects
    /// it kept, and the page's resource version or the error.
    async fn list_of_chunks(
        body: &[u8],
        chunk: usize,
        end: Option<std::io::ErrorKind>,
        parallel_from: usize,
    ) -> (Vec<Arc<Pod>>, Result<String, String>) {
        let negotiation = Negotiation::default();
        let mut sink = ListSink::new();
        let chunks = in_chunks(body, chunk, end);
        match list_page_of_chunks(chunks, decoding(parallel_from), &negotiation, &mut sink).await {
            Ok(page) => (page.items, Ok(page.resource_version)),
            Err(e) => (sink.take_kept(), Err(e.to_string())),
        }
    }

    #[tokio::test]
    async fn a_list_in_many_chunks_is_decoded_together_as_one_thread_decodes_it() {
        let body = list_body(300);
        let (serial, rv) = list_of_chunks(&body, body.len(), None, usize::MAX).await;
        assert_eq!((serial.len(), rv.as_deref()), (300, Ok("999")));
        for chunk in [100, 1000, 7000] {
            let pooled = list_of_chunks(&body, chunk, None, 0).await;
            assert_eq!(
                pooled,
                (serial.clone(), rv.clone()),
                "chunks of {chunk} bytes"
            );
        }
        // A connection broken after every chunk has come: the list fails with it, every
        // complete item handed on first, alike.
        let cut = &body[..body.len() / 2];
        let broken = Some(std::io::ErrorKind::ConnectionReset);
        let (kept, end) = list_of_chunks(cut, cut.len(), broken, usize::MAX).await;
        assert!(end.as_ref().is_err_and(|e| e.contains("broke")), "{end:?}");
        assert!(kept.len() > 100, "{} items kept", kept.len());
        assert_eq!(list_of_chunks(cut, 500, broken, 0).await, (kept, end));
    }

    #[tokio::test]
    async fn the_frames_already_here_are_decoded_together_and_passed_on_in_order() {
        // One chunk per frame, as a server writes them, all of them arrived.
        let one_per_chunk = (0..200).map(|i| Ok(bytes::Bytes::from(frames(i..i + 1))));
        let chunks = futures::stream::iter(one_per_chunk.collect::<Vec<_>>()).boxed();
        let mut stream =
            WatchFrames::<Pod>::of_chunks(chunks, decoding(0), Arc::new(Negotiation::default()));
        let first = stream.next().await.expect("an event").expect("decodes");
        assert!(
            matches!(first, kube::api::WatchEvent::Added(p) if p.metadata.name.as_deref() == Some("pod-0"))
        );
        assert_eq!(stream.decoded.len(), 199, "the rest decoded with it");
        let mut names = Vec::new();
        while let Some(event) = stream.next().await {
            if let kube::api::WatchEvent::Modified(p) = event.expect("decodes") {
                names.push(p.metadata.name.clone().unwrap_or_default());
            }
        }
        let expected: Vec<String> = (1..200)
            .filter(|i| i % 3 == 1)
            .map(|i| format!("pod-{i}"))
            .collect();
        assert_eq!(names, expected);
    }

    /// The names and types of the events of a stream, until it ends.
    async fn names(stream: &mut WatchFrames<Pod>) -> Vec<String> {
        let mut names = Vec::new();
        while let Some(event) = stream.next().await {
            match event.expect("decodes") {
                kube::api::WatchEvent::Added(p)
                | kube::api::WatchEvent::Modified(p)
                | kube::api::WatchEvent::Deleted(p) => {
                    names.push(p.metadata.name.clone().unwrap_or_default())
                }
                other => panic!("{other:?}"),
            }
        }
        names
    }

    #[tokio::test]
    async fn the_next_frames_are_read_and_sent_to_the_pool_while_a_batch_is_handed_on() {
        let (sender, receiver) = futures::channel::mpsc::unbounded();
        let send = |range: std::ops::Range<usize>| {
            for i in range {
                sender
                    .unbounded_send(Ok(bytes::Bytes::from(frames(i..i + 1))))
                    .unwrap();
            }
        };
        send(0..200);
        let negotiation = Arc::new(Negotiation::default());
        let mut stream = WatchFrames::<Pod>::of_chunks(receiver.boxed(), decoding(0), negotiation);
        stream.next().await.expect("an event").expect("decodes");
        assert_eq!(stream.decoded.len(), 199, "the first batch");
        send(200..400);
        // The next `LOOK_EVERY` events are handed on without a look at the body; the one after
        // them looks, reads the frames that came and sends them to the pool.
        for _ in 0..LOOK_EVERY {
            stream.next().await.expect("an event").expect("decodes");
        }
        assert_eq!(stream.decoded.len(), 199 - LOOK_EVERY);
        assert_eq!(stream.on_pool.len(), 0, "the body not looked at yet");
        stream.next().await.expect("an event").expect("decodes");
        if crate::parallel::available() {
            assert_eq!(
                stream.decoded.len(),
                198 - LOOK_EVERY,
                "the first batch goes on being handed on"
            );
            assert_eq!(stream.on_pool.len(), 1, "while the next is decoded");
        }
        send(400..450);
        drop(sender);
        let rest = names(&mut stream).await;
        let expected: Vec<_> = (LOOK_EVERY + 2..450).map(|i| format!("pod-{i}")).collect();
        assert_eq!(rest, expected);
    }

    #[tokio::test]
    async fn a_batch_holds_a_page_of_frames_at_most_however_small_they_are() {
        let one_per_chunk: Vec<_> = (0..2000)
            .map(|i| Ok(bytes::Bytes::from(frames(i..i + 1))))
            .collect();
        let mut stream = WatchFrames::<Pod>::of_chunks(
            futures::stream::iter(one_per_chunk).boxed(),
            decoding(0),
            Arc::new(Negotiation::default()),
        );
        stream.next().await.expect("an event").expect("decodes");
        let at_most = crate::parallel::FRAMES_AT_MOST;
        if crate::parallel::available() {
            assert_eq!(
                stream.decoded.len(),
                at_most - 1,
                "the first batch, handed on"
            );
        }
        assert!(stream.on_pool.len() <= ON_POOL);
        assert!(
            stream.complete.len() <= at_most,
            "{}",
            stream.complete.len()
        );
        let rest = names(&mut stream).await;
        let expected: Vec<_> = (1..2000).map(|i| format!("pod-{i}")).collect();
        assert_eq!(rest, expected);
    }

    /// The names of the events of frames written in bursts of 1 to 300, in chunks that cut
    /// frames anywhere, the reader taking them as they come; frame `bad` (if any) of a type
    /// no watch has. Then the error that ended the stream, if one did, and the frames written.
    async fn read_bursts(
        parallel_from: usize,
        bad: Option<usize>,
    ) -> (Vec<String>, Option<String>, usize) {
        let (sender, receiver) = futures::channel::mpsc::channel(8);
        let mut stream = WatchFrames::<Pod>::of_chunks(
            receiver.boxed(),
            decoding(parallel_from),
            Arc::new(Negotiation::default()),
        );
        let writer = tokio::spawn(async move {
            use futures::SinkExt;
            let mut sender = sender;
            let mut next = 0;
            for burst in [1, 300, 2, 57, 250, 1, 1, 120, 299, 3] {
                let bytes: Vec<u8> = (next..next + burst)
                    .flat_map(|i| {
                        let kind = if Some(i) == bad { "NEITHER" } else { "ADDED" };
                        informer_apiserver::protobuf_watch_frame(kind, &pod(i)).expect("a frame")
                    })
                    .collect();
                next += burst;
                for piece in bytes.chunks(1 + burst * 37) {
                    let piece = bytes::Bytes::copy_from_slice(piece);
                    // The reader stops at a bad frame.
                    if sender.send(Ok(piece)).await.is_err() {
                        return next;
                    }
                }
                tokio::task::yield_now().await;
            }
            next
        });
        let mut names = Vec::new();
        let mut end = None;
        while let Some(event) = stream.next().await {
            match event {
                Ok(kube::api::WatchEvent::Added(p)) => {
                    names.push(p.metadata.name.clone().unwrap_or_default())
                }
                Ok(other) => panic!("{other:?}"),
                Err(e) => {
                    assert!(stream.next().await.is_none(), "nothing after an error");
                    end = Some(e.to_string());
                    break;
                }
            }
        }
        drop(stream);
        (names, end, writer.await.unwrap())
    }

    #[tokio::test]
    async fn frames_that_come_in_bursts_while_others_are_decoded_come_out_in_order() {
        for parallel_from in [0, 4096, usize::MAX] {
            let (names, end, sent) = read_bursts(parallel_from, None).await;
            let expected: Vec<_> = (0..sent).map(|i| format!("pod-{i}")).collect();
            assert_eq!(
                (names, end),
                (expected, None),
                "parallel from {parallel_from}"
            );
        }
    }

    #[tokio::test]
    async fn a_bad_frame_among_batches_on_the_pool_ends_the_stream_there() {
        for parallel_from in [0, 4096, usize::MAX] {
            let (names, end, _) = read_bursts(parallel_from, Some(700)).await;
            let expected: Vec<_> = (0..700).map(|i| format!("pod-{i}")).collect();
            assert_eq!(names, expected, "parallel from {parallel_from}");
            let end = end.expect("the bad frame ends the stream");
            assert!(end.contains("NEITHER"), "{end}");
        }
    }

    #[tokio::test]
    async fn a_burst_of_frames_decoded_on_the_pool_is_the_burst_decoded_on_one_thread() {
        let body = frames(0..200);
        let (serial, end) = read_watch(body.clone(), usize::MAX).await;
        assert_eq!(end, None);
        assert_eq!(serial.len(), 200);
        assert_eq!(serial[4], "MODIFIED pod-4 104");
        assert_eq!(read_watch(body, 0).await, (serial, None));
    }

    #[tokio::test]
    async fn a_bad_frame_in_a_burst_ends_the_stream_there_on_the_pool_as_on_one_thread() {
        let mut body = frames(0..50);
        let bad = informer_apiserver::protobuf_watch_frame("NEITHER", &pod(50)).expect("a frame");
        body.extend_from_slice(&bad);
        body.extend(frames(51..100));
        let (serial, end) = read_watch(body.clone(), usize::MAX).await;
        assert_eq!(serial.len(), 50, "the events before the bad frame");
        let end = end.expect("the bad frame ends the stream");
        assert!(end.contains("NEITHER"), "{end}");
        assert_eq!(read_watch(body, 0).await, (serial, Some(end)));
    }

    #[tokio::test]
    async fn a_frame_too_long_after_a_burst_ends_the_stream_after_the_burst() {
        let mut body = frames(0..40);
        body.extend_from_slice(&u32::MAX.to_be_bytes());
        body.extend_from_slice(&[0; 16]);
        let (serial, end) = read_watch(body.clone(), usize::MAX).await;
        assert_eq!(serial.len(), 40);
        assert!(end.is_some(), "a length beyond any frame is an error");
        assert_eq!(read_watch(body, 0).await, (serial, end));
    }
}
