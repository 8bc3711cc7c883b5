//! The watch decoder: each line of a watch body decoded into an event as kube-client decodes
//! it, and the body's stream of events.

use std::sync::Arc;

use bytes::Bytes;
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
