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
//!
//! Its submodules: [`response`] sends a request and reads its body's chunks; [`lines`] frames a
//! watch body into lines and [`watch`] decodes them into events; [`list`] decodes a list body
//! item by item, over [`value`], which finds where each JSON value ends. Here: how objects are
//! decoded ([`Decoding`], [`InArc`]), and the public decoders, for benchmarks and tools.

mod lines;
mod list;
mod response;
mod value;
mod watch;

use std::sync::Arc;

use informer_reflector::{Error, ListPage, ListSink};
use serde::Deserialize;
use serde::de::DeserializeOwned;

use crate::error::error_from_kube;

use self::list::ListScanner;
pub(crate) use self::list::list_page;
pub(crate) use self::response::{chunks, send};
pub(crate) use self::watch::watch_events;
use self::watch::watch_line;

/// How objects are decoded: whole, or without their `metadata.managedFields`
/// ([`crate::skip`]); on one thread, or the complete objects of a protobuf chunk together on
/// several ([`crate::parallel`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Decoding {
    /// Leave `metadata.managedFields` out of every object.
    pub(crate) skip_managed_fields: bool,
    /// The complete objects of a protobuf chunk are decoded on several threads from this many
    /// bytes of them; `usize::MAX`: always on the reading thread.
    pub(crate) parallel_from: usize,
}

impl Default for Decoding {
    fn default() -> Self {
        Self {
            skip_managed_fields: false,
            parallel_from: crate::parallel::PARALLEL_FROM,
        }
    }
}

impl Decoding {
    /// Decodes `text` as a `T` (an object, or a watch event of one) through
    /// [`WithoutManagedFields`](crate::skip::WithoutManagedFields) when managed fields are skipped.
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

/// The adapter's decoding of one list response's body, as a [`KubeListerWatcher`] decodes it:
/// item by item as the body arrives, here in pieces of `chunk` bytes (at least one), each item
/// without its managed fields if `without_managed_fields`. A body that opens with protobuf's
/// `k8s\0` is read as protobuf, any other as JSON. For benchmarks and tools that time or check
/// the decoder on bytes of their own.
///
/// [`KubeListerWatcher`]: crate::KubeListerWatcher
pub fn decode_list_body<K: DeserializeOwned + Send + Sync + 'static>(
    body: &[u8],
    chunk: usize,
    without_managed_fields: bool,
) -> Result<ListPage<K>, Error> {
    // One thread: a benchmark of this times the decoder, not the machine's cores.
    let decoding = Decoding {
        skip_managed_fields: without_managed_fields,
        parallel_from: usize::MAX,
    };
    let mut sink = ListSink::new();
    if body.starts_with(informer_protobuf::MAGIC) {
        let negotiation = crate::protobuf::Negotiation::default();
        let objects = crate::protobuf::Objects::new(decoding);
        let mut reader = crate::protobuf::ListReader::new(objects, &negotiation);
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
        ..Decoding::default()
    };
    watch_line::<K>(line, decoding).map(|event| event.map_err(error_from_kube))
}

/// The adapter's decoding of one protobuf watch frame (a `meta.v1.WatchEvent` message, without
/// its 4-byte length), as a [`KubeListerWatcher`]'s stream decodes it. For benchmarks and tools,
/// as [`decode_list_body`].
///
/// [`KubeListerWatcher`]: crate::KubeListerWatcher
pub fn decode_watch_frame<K: DeserializeOwned + Send + Sync + 'static>(
    frame: &[u8],
    without_managed_fields: bool,
) -> Result<kube::api::WatchEvent<Arc<K>>, Error> {
    let objects = crate::protobuf::Objects::new(Decoding {
        skip_managed_fields: without_managed_fields,
        ..Decoding::default()
    });
    crate::protobuf::frame_event(frame, objects, &crate::protobuf::Negotiation::default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use serde_json::json;

    /// What serde_json makes of the whole body: the model.
    pub(super) fn model(body: &[u8]) -> Option<(Vec<ConfigMap>, String, Option<String>)> {
        let list: kube::core::ObjectList<ConfigMap> = serde_json::from_slice(body).ok()?;
        let rv = list.metadata.resource_version.filter(|rv| !rv.is_empty())?;
        Some((
            list.items,
            rv,
            list.metadata.continue_.filter(|c| !c.is_empty()),
        ))
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
