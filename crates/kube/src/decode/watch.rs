//! The watch decoder: each line of a watch body decoded into an event as kube-client decodes
//! it, and the body's stream of events.

use std::collections::VecDeque;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use kube::client::Body;
use serde::de::DeserializeOwned;

use super::lines::Lines;
use super::response::chunks;
use super::{Decoding, InArc};
use crate::skip::WithoutManagedFields;

/// One watch line decoded as kube-client decodes it; `None` for a line it skips. The object is
/// put in its `Arc` as it is decoded: an event then moves a pointer, not the object (a `Pod` is
/// kilobytes by value), on its way to the reflector.
pub(super) fn watch_line<K: DeserializeOwned>(
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
    WatchLines::<K> {
        body: chunks(body).boxed(),
        lines: Lines::default(),
        ready: VecDeque::new(),
        ended: false,
        decoding,
        object: PhantomData,
    }
}

/// A watch body's lines decoded into events, one at a time as they are polled: a `Stream` of
/// its own, so that an event costs its line's decoding and no future of its own (a streaming
/// list reads one per object).
struct WatchLines<K> {
    body: BoxStream<'static, Result<Bytes, std::io::Error>>,
    lines: Lines,
    /// Lines framed and not decoded yet.
    ready: VecDeque<Bytes>,
    /// The body has ended, or an error ended the stream: what is ready is all that is left.
    ended: bool,
    decoding: Decoding,
    object: PhantomData<fn() -> K>,
}

impl<K: DeserializeOwned> Stream for WatchLines<K> {
    type Item = Result<kube::api::WatchEvent<Arc<K>>, kube::Error>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            while let Some(line) = this.ready.pop_front() {
                if let Some(event) = watch_line::<K>(&line, this.decoding) {
                    if matches!(event, Err(kube::Error::ReadEvents(_))) {
                        // kube-client's line decoder ends the stream at a line that is not
                        // UTF-8.
                        this.ended = true;
                        this.ready.clear();
                    }
                    return Poll::Ready(Some(event));
                }
            }
            if this.ended {
                return Poll::Ready(None);
            }
            match futures::ready!(this.body.poll_next_unpin(cx)) {
                Some(Ok(chunk)) => this.lines.push(chunk, &mut this.ready),
                Some(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                    tracing::debug!("watch body cut short: {e}");
                    this.ended = true;
                }
                Some(Err(e)) => {
                    this.ended = true;
                    return Poll::Ready(Some(Err(kube::Error::ReadEvents(e))));
                }
                None => {
                    this.ended = true;
                    this.ready.extend(this.lines.finish());
                }
            }
        }
    }
}
