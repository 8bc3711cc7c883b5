//! Response compression as kube-apiserver does it (its `APIResponseCompression` feature, beta
//! and on by default since 1.16; `k8s.io/apiserver/pkg/endpoints/handlers/responsewriters`):
//!
//! * a client asks for it with an `Accept-Encoding` header one of whose comma-separated tokens
//!   is exactly `gzip` once trimmed (no quality values are read: `gzip;q=0.5` is not `gzip`);
//! * only a response of more than 128 KiB (`defaultGzipThresholdBytes`) is compressed, with
//!   gzip at level 1 (`gzipContentEncodingLevel`), with `Content-Encoding: gzip` and
//!   `Vary: Accept-Encoding`; a smaller one is sent as it is;
//! * that covers every object response (a get, a list, a write's answer; in practice lists
//!   and the odd huge object), JSON and protobuf alike; never a watch: kube-apiserver 1.36
//!   compresses no watch stream (gzip of streaming lists, `WatchListCompression`, came in
//!   1.37).
//!
//! The gzip stream is tower-http's (`async-compression` over flate2), written as the body is
//! sent. Every response body of the simulator but a watch's is one buffer of known length;
//! a watch stream has none, and only bodies of known length are compressed.

use axum::extract::Request;
use axum::http::{HeaderValue, header};
use http_body::Body;
use tower_http::compression::predicate::Predicate;
use tower_http::compression::{CompressionLayer, CompressionLevel};

/// kube-apiserver's `defaultGzipThresholdBytes`: responses of this size or less are not
/// compressed.
pub(crate) const THRESHOLD_BYTES: u64 = 128 * 1024;

/// Whether kube-apiserver gzips for this `Accept-Encoding` value: one of its comma-separated
/// tokens is `gzip` once trimmed.
pub(crate) fn asks_for_gzip(accept_encoding: &str) -> bool {
    accept_encoding
        .split(',')
        .any(|token| token.trim() == "gzip")
}

/// Rewrites the request's `Accept-Encoding` to what kube-apiserver understands of it: exactly
/// `gzip`, or nothing. The compression layer behind it then reads no quality values and no
/// other coding.
pub(crate) async fn negotiate(mut request: Request) -> Request {
    let gzip = request
        .headers()
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .any(asks_for_gzip);
    let headers = request.headers_mut();
    headers.remove(header::ACCEPT_ENCODING);
    if gzip {
        headers.insert(header::ACCEPT_ENCODING, HeaderValue::from_static("gzip"));
    }
    request
}

/// The responses compressed: those of known length above [`THRESHOLD_BYTES`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct AboveThreshold;

impl Predicate for AboveThreshold {
    fn should_compress<B>(&self, response: &axum::http::Response<B>) -> bool
    where
        B: Body,
    {
        response
            .body()
            .size_hint()
            .exact()
            .is_some_and(|len| len > THRESHOLD_BYTES)
    }
}

/// The compression layer: gzip only, at level 1, for responses [`AboveThreshold`]; behind
/// [`negotiate`].
pub(crate) fn layer() -> CompressionLayer<AboveThreshold> {
    CompressionLayer::new()
        .gzip(true)
        .no_br()
        .no_deflate()
        .no_zstd()
        .quality(CompressionLevel::Precise(1))
        .compress_when(AboveThreshold)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gzip_is_asked_for_by_a_token_that_is_exactly_gzip() {
        for asks in ["gzip", "gzip, deflate", "deflate,gzip", " br , gzip "] {
            assert!(asks_for_gzip(asks), "{asks:?}");
        }
        for does_not in [
            "",
            "identity",
            "deflate, br",
            "gzip;q=1.0",
            "x-gzip",
            "GZIP",
            "*",
        ] {
            assert!(!asks_for_gzip(does_not), "{does_not:?}");
        }
    }
}
