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

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};

use futures::{Stream, StreamExt};
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
    let mut reader = ListReader::new(Objects::new(decoding), negotiation);
    let mut body = std::pin::pin!(chunks(body));
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| Error::Transport(Box::new(e)))?;
        reader.push(&chunk, sink)?;
        sink.ready().await;
    }
    reader.finish(sink)
}

/// A protobuf list body's items decoded as its chunks come ([`list_page`]).
pub(crate) struct ListReader<'n, K> {
    decoder: ListDecoder,
    objects: Objects<K>,
    negotiation: &'n Negotiation,
    decoded: usize,
}

impl<'n, K: DeserializeOwned + Send + Sync + 'static> ListReader<'n, K> {
    pub(crate) fn new(objects: Objects<K>, negotiation: &'n Negotiation) -> Self {
        Self {
            decoder: ListDecoder::default(),
            objects,
            negotiation,
            decoded: 0,
        }
    }

    /// Takes a chunk, decoding every item it completes into `sink`.
    pub(crate) fn push(&mut self, chunk: &[u8], sink: &mut ListSink<'_, K>) -> Result<(), Error> {
        self.decoder.push(chunk);
        while let Some((bytes, message)) = self
            .decoder
            .next_item()
            .map_err(|e| self.negotiation.error("list response", e))?
        {
            let item = self
                .objects
                .read(Source::Message(message, bytes))
                .map_err(|e| {
                    let what = format!("list response: item {}", self.decoded);
                    self.negotiation.error(&what, e)
                })?;
            self.decoded += 1;
            sink.push(item)?;
        }
        Ok(())
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
/// A `Stream` of its own rather than a combinator chain: a streaming list reads one event per
/// object, so what each event costs beyond its object's decoding (a future built per item,
/// an `Arc` cloned per item) is paid tens of thousands of times per sync.
pub(crate) struct WatchFrames<K> {
    body: futures::stream::BoxStream<'static, Result<bytes::Bytes, std::io::Error>>,
    frames: FrameDecoder,
    objects: Objects<K>,
    negotiation: Arc<Negotiation>,
    ended: bool,
}

impl<K: DeserializeOwned + Send + Sync + 'static> WatchFrames<K> {
    pub(crate) fn new(body: Body, decoding: Decoding, negotiation: Arc<Negotiation>) -> Self {
        Self {
            body: chunks(body).boxed(),
            frames: FrameDecoder::default(),
            objects: Objects::new(decoding),
            negotiation,
            ended: false,
        }
    }
}

impl<K: DeserializeOwned + Send + Sync + 'static> Stream for WatchFrames<K> {
    type Item = Result<kube::api::WatchEvent<Arc<K>>, Error>;

    fn poll_next(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        use std::task::Poll;
        let this = self.get_mut();
        while !this.ended {
            match this.frames.next_frame() {
                Ok(Some(frame)) => {
                    let event = frame_event(frame, this.objects, &this.negotiation);
                    // An event that cannot be read ends the stream (the reflector watches
                    // again, or relists).
                    this.ended = event.is_err();
                    return Poll::Ready(Some(event));
                }
                Ok(None) => {}
                Err(e) => {
                    this.ended = true;
                    return Poll::Ready(Some(Err(this.negotiation.error("watch stream", e))));
                }
            }
            match futures::ready!(this.body.poll_next_unpin(cx)) {
                Some(Ok(chunk)) => this.frames.push(&chunk),
                Some(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                    tracing::debug!("watch body cut short: {e}");
                    this.ended = true;
                }
                Some(Err(e)) => {
                    this.ended = true;
                    return Poll::Ready(Some(Err(Error::Transport(Box::new(e)))));
                }
                None => {
                    if this.frames.pending() > 0 {
                        tracing::debug!(
                            bytes = this.frames.pending(),
                            "watch body ended inside a frame"
                        );
                    }
                    this.ended = true;
                }
            }
        }
        Poll::Ready(None)
    }
}

/// A protobuf `Status` body (an error response), if it is one.
pub(crate) fn status(body: &[u8]) -> Option<kube::core::Status> {
    informer_protobuf::from_slice(body).ok()
}
