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
}

impl Parser {
    /// Every parser, in the report's order.
    pub const ALL: [Self; 4] = [
        Self::SerdeJsonSlice,
        Self::SerdeJsonStr,
        Self::SonicRs,
        Self::SimdJson,
    ];

    /// Its name in the report.
    pub fn name(self) -> &'static str {
        match self {
            Self::SerdeJsonSlice => "serde_json from_slice",
            Self::SerdeJsonStr => "from_utf8 + serde_json from_str (ours)",
            Self::SonicRs => "sonic-rs from_slice",
            Self::SimdJson => "simd-json from_slice (on a copy)",
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_parser_decodes_the_same_pod() {
        for docs in [synthetic(3), realistic(2)] {
            for doc in &docs {
                let want = Parser::SerdeJsonSlice.decode(doc);
                for parser in Parser::ALL {
                    assert_eq!(parser.decode(doc), want, "{parser:?}");
                }
            }
        }
    }
}
