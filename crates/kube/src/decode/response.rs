//! A request sent through kube-client, and its response: the body if the status is a success,
//! the server's `Status` as an error otherwise; and the body's data chunks.

use bytes::Bytes;
use futures::{Stream, StreamExt};
use http_body_util::BodyExt;
use informer_reflector::Error;
use kube::client::Body;

use crate::error::error_from_kube;
use crate::protobuf::Encoding;

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
