//! DECODE: the JSON parsers the adapter could decode list items and watch lines with, on the
//! same bytes: a `Pod` from its JSON, per pod, for the synthetic pod of the other workloads and
//! the realistic one ([`crate::realistic`]).
//!
//! * `serde_json::from_slice`: bytes in, every string checked for UTF-8 as it is read;
//! * `serde_json::from_str` after `std::str::from_utf8`: one fast UTF-8 pass over the whole
//!   document, then no check per string (what the adapter does; kube-client copies each line
//!   into a `String` and then decodes it with `from_str`);
//! * `sonic_rs::from_slice` (SIMD);
//! * `simd_json::serde::from_slice` (SIMD; decodes in place, so each document is copied into a
//!   buffer it may change first, inside the clock).
//!
//! And the same pods as a list page and as watch lines ([`Path`]): through the adapter's own
//! decoders (`informer_kube::decode_list_body`, `decode_watch_line`) and through what
//! kube-client does with the same bytes.

use std::hint::black_box;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;

/// A way to decode a document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parser {
    /// `serde_json::from_slice`.
    SerdeJsonSlice,
    /// `std::str::from_utf8`, then `serde_json::from_str`.
    SerdeJsonStr,
    /// `sonic_rs::from_slice`.
    SonicRs,
    /// `simd_json::serde::from_slice` on a copy.
    SimdJson,
    /// `informer_protobuf::from_slice` on the protobuf form (the serde path, what the adapter
    /// reads a projection of a pod with): its documents are [`protobuf`]'s.
    Protobuf,
    /// The `Pod`'s generated decoder on the protobuf form (`Envelope::decode_generated`, what
    /// the adapter reads a `Pod` with when the server sends protobuf): its documents are
    /// [`protobuf`]'s.
    ProtobufGenerated,
}

impl Parser {
    /// Every parser, in the report's order.
    pub const ALL: [Self; 6] = [
        Self::SerdeJsonSlice,
        Self::SerdeJsonStr,
        Self::SonicRs,
        Self::SimdJson,
        Self::Protobuf,
        Self::ProtobufGenerated,
    ];

    /// Whether its documents are protobuf ([`protobuf`]'s), not JSON.
    pub fn reads_protobuf(self) -> bool {
        matches!(self, Self::Protobuf | Self::ProtobufGenerated)
    }

    /// Its name in the report.
    pub fn name(self) -> &'static str {
        match self {
            Self::SerdeJsonSlice => "serde_json from_slice",
            Self::SerdeJsonStr => "from_utf8 + serde_json from_str (ours)",
            Self::SonicRs => "sonic-rs from_slice",
            Self::SimdJson => "simd-json from_slice (on a copy)",
            Self::Protobuf => "protobuf: informer-protobuf from_slice (ours, serde)",
            Self::ProtobufGenerated => "protobuf: informer-protobuf generated decoder (ours)",
        }
    }

    /// Decodes one document.
    pub fn decode(self, doc: &[u8]) -> Pod {
        match self {
            Self::SerdeJsonSlice => serde_json::from_slice(doc).expect("decodes"),
            Self::SerdeJsonStr => {
                let text = std::str::from_utf8(doc).expect("UTF-8");
                serde_json::from_str(text).expect("decodes")
            }
            Self::SonicRs => sonic_rs::from_slice(doc).expect("decodes"),
            Self::SimdJson => {
                let mut copy = doc.to_vec();
                simd_json::serde::from_slice(&mut copy).expect("decodes")
            }
            Self::Protobuf => informer_protobuf::from_slice(doc).expect("decodes"),
            Self::ProtobufGenerated => informer_protobuf::envelope::open(doc)
                .and_then(|e| e.decode_generated(informer_protobuf::DecodeOptions::new()))
                .expect("decodes"),
        }
    }
}

/// Time per document to decode every one of `docs` with `parser`.
pub fn per_doc(parser: Parser, docs: &[Vec<u8>]) -> Duration {
    let started = Instant::now();
    for doc in docs {
        black_box(parser.decode(black_box(doc)));
    }
    started.elapsed() / docs.len().max(1) as u32
}

/// The synthetic pods `0..n` as JSON.
pub fn synthetic(n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| serde_json::to_vec(&crate::workload::pod(i)).expect("encodes"))
        .collect()
}

/// The realistic pods `0..n` as JSON.
pub fn realistic(n: usize) -> Vec<Vec<u8>> {
    (0..n).map(crate::realistic::realistic_pod_json).collect()
}

/// The protobuf form of JSON documents (each with its `apiVersion` and `kind`), as the API
/// server simulator encodes them.
pub fn protobuf(docs: &[Vec<u8>]) -> Vec<Vec<u8>> {
    docs.iter()
        .map(|doc| {
            let value: serde_json::Value = serde_json::from_slice(doc).expect("JSON");
            informer_apiserver::encode_protobuf(&value).expect("a built-in kind")
        })
        .collect()
}

/// Who decodes a list page or a watch line: the adapter, or kube-client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Path {
    /// `informer_kube`'s decoders: a list body item by item in pieces of
    /// [`BODY_CHUNK`] bytes, a watch line from its bytes.
    Ours,
    /// kube-client's: the list body copied into a `String`, then the whole `ObjectList<Pod>`
    /// decoded with `serde_json::from_str`; each watch line copied into a `String`, then a
    /// `WatchEvent<Pod>` decoded with `serde_json::from_str` (what `Api::list` and
    /// `Api::watch` do with the bytes they receive).
    KubeClient,
}

/// The size of the pieces a list body is handed to the adapter's decoder in (a typical HTTP
/// body frame).
pub const BODY_CHUNK: usize = 16 * 1024;

/// `docs` as one list response body (`PodList`, resource version `"1"`).
pub fn list_body(docs: &[Vec<u8>]) -> Vec<u8> {
    let mut body =
        br#"{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":["#
            .to_vec();
    for (i, doc) in docs.iter().enumerate() {
        if i > 0 {
            body.push(b',');
        }
        body.extend_from_slice(doc);
    }
    body.extend_from_slice(b"]}");
    body
}

/// `docs` as watch lines (`MODIFIED` events, without their newline).
pub fn watch_lines(docs: &[Vec<u8>]) -> Vec<Vec<u8>> {
    docs.iter()
        .map(|doc| {
            let mut line = br#"{"type":"MODIFIED","object":"#.to_vec();
            line.extend_from_slice(doc);
            line.push(b'}');
            line
        })
        .collect()
}

/// A decoded list page, as each path keeps it.
#[derive(Debug)]
pub enum Decoded {
    /// The adapter's page: each pod in its `Arc`.
    Ours(Vec<std::sync::Arc<Pod>>),
    /// kube-client's `ObjectList`.
    KubeClient(kube::core::ObjectList<Pod>),
}

impl Decoded {
    /// The number of pods.
    pub fn len(&self) -> usize {
        match self {
            Self::Ours(items) => items.len(),
            Self::KubeClient(list) => list.items.len(),
        }
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Decodes a list body the way `path` does.
pub fn decode_list(path: Path, body: &[u8]) -> Decoded {
    match path {
        Path::Ours => Decoded::Ours(
            informer_kube::decode_list_body::<Pod>(body, BODY_CHUNK, false)
                .expect("decodes")
                .items,
        ),
        Path::KubeClient => {
            let text = String::from_utf8(body.to_vec()).expect("UTF-8");
            Decoded::KubeClient(serde_json::from_str(&text).expect("decodes"))
        }
    }
}

/// Decodes a watch line the way `path` does.
pub fn decode_line(path: Path, line: &[u8]) -> bool {
    match path {
        Path::Ours => matches!(
            informer_kube::decode_watch_line::<Pod>(line, false),
            Some(Ok(kube::api::WatchEvent::Modified(_)))
        ),
        Path::KubeClient => {
            let text = String::from_utf8(line.to_vec()).expect("UTF-8");
            let event: kube::api::WatchEvent<Pod> = serde_json::from_str(&text).expect("decodes");
            matches!(event, kube::api::WatchEvent::Modified(_))
        }
    }
}

/// Time per pod to decode `body` (a list of `pods`) the way `path` does and drop the page
/// again, `times` times.
///
/// The drop is inside the clock: both paths free what they decoded sooner or later, and
/// leaving it out makes the figure depend on what glibc's allocator has left over from the
/// page before (a page dropped outside the clock is consolidated inside it, by the next page's
/// allocations), which moved either path by up to 2× from one arrangement to the next here.
pub fn per_list_item(path: Path, body: &[u8], pods: usize, times: usize) -> Duration {
    let started = Instant::now();
    for _ in 0..times.max(1) {
        let page = black_box(decode_list(path, black_box(body)));
        assert_eq!(page.len(), pods);
    }
    started.elapsed() / (pods.max(1) * times.max(1)) as u32
}

/// Time per line to decode every one of `lines` the way `path` does.
pub fn per_watch_line(path: Path, lines: &[Vec<u8>]) -> Duration {
    let started = Instant::now();
    for line in lines {
        assert!(black_box(decode_line(path, black_box(line))));
    }
    started.elapsed() / lines.len().max(1) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_parser_decodes_the_same_pod() {
        for docs in [synthetic(3), realistic(2)] {
            let pb_docs = protobuf(&docs);
            for (doc, pb_doc) in docs.iter().zip(&pb_docs) {
                let want = Parser::SerdeJsonSlice.decode(doc);
                for parser in Parser::ALL {
                    let doc = if parser.reads_protobuf() { pb_doc } else { doc };
                    assert_eq!(parser.decode(doc), want, "{parser:?}");
                }
            }
        }
    }

    #[test]
    fn both_paths_decode_the_same_list_and_lines() {
        for docs in [synthetic(3), realistic(2)] {
            let body = list_body(&docs);
            let ours = informer_kube::decode_list_body::<Pod>(&body, BODY_CHUNK, false).unwrap();
            let want: Vec<Pod> = docs
                .iter()
                .map(|d| Parser::SerdeJsonSlice.decode(d))
                .collect();
            let got: Vec<Pod> = ours.items.iter().map(|p| (**p).clone()).collect();
            assert_eq!(got, want);
            for path in [Path::Ours, Path::KubeClient] {
                assert_eq!(decode_list(path, &body).len(), docs.len());
                for line in watch_lines(&docs) {
                    assert!(decode_line(path, &line), "{path:?}");
                }
            }
        }
    }
}
