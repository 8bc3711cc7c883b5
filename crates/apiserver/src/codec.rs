//! Content negotiation: the request body's media type and the response encoding (JSON, or the
//! Kubernetes protobuf encoding of the built-in types with the `protobuf` feature), and the
//! responses every handler builds (JSON documents, `Status` errors, injected failures).

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use crate::faults::Failure;
use crate::resource::ResourceInfo;
use crate::status::StatusError;

const JSON: &str = "application/json";
#[cfg(feature = "protobuf")]
use crate::protobuf::MEDIA_TYPE as PROTOBUF;
#[cfg(not(feature = "protobuf"))]
const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

/// The encoding of a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Output {
    Json,
    #[cfg_attr(not(feature = "protobuf"), allow(dead_code))]
    Protobuf,
}

/// Whether the protobuf encoding serves this resource (a built-in type it has a message for;
/// custom resources are JSON only, as kube-apiserver's CRD handler).
pub(crate) fn serves(info: &ResourceInfo) -> bool {
    #[cfg(feature = "protobuf")]
    {
        crate::protobuf::message_for(&info.api_version(), &info.kind).is_some()
    }
    #[cfg(not(feature = "protobuf"))]
    {
        let _ = info;
        false
    }
}

/// Picks the response encoding from `Accept` (media ranges with q-values, best first; the
/// server's order, JSON before protobuf, breaks ties). No header, or one naming nothing this
/// server writes at all (YAML, CBOR, ...), gets JSON as before; a header that allows protobuf
/// only, for a resource that has no protobuf form, is 406.
pub(crate) fn negotiate(accept: &str, protobuf: bool) -> Result<Output, StatusError> {
    if accept.trim().is_empty() {
        return Ok(Output::Json);
    }
    let mut best: Option<(f32, Output)> = None;
    let mut names_protobuf = false;
    for range in accept.split(',') {
        let mut parts = range.split(';');
        let media = parts.next().unwrap_or("").trim().to_ascii_lowercase();
        let q = parts
            .filter_map(|p| p.trim().strip_prefix("q="))
            .find_map(|q| q.trim().parse::<f32>().ok())
            .unwrap_or(1.0);
        if q <= 0.0 {
            continue;
        }
        let output = match media.as_str() {
            "application/json" | "*/*" | "application/*" => Output::Json,
            m if m == PROTOBUF => {
                names_protobuf = true;
                if !protobuf {
                    continue;
                }
                Output::Protobuf
            }
            _ => continue,
        };
        if best.is_none_or(|(b, _)| q > b) {
            best = Some((q, output));
        }
    }
    match best {
        Some((_, output)) => Ok(output),
        None if names_protobuf => Err(StatusError::not_acceptable(&[JSON, "application/yaml"])),
        None => Ok(Output::Json),
    }
}

/// A JSON request body as a value; 400 when it is not JSON.
pub(crate) fn parse_body(body: &[u8]) -> Result<Value, StatusError> {
    serde_json::from_slice(body).map_err(|e| {
        StatusError::bad_request(format!(
            "the object provided is unrecognized: couldn't get version/kind; json parse error: {e}"
        ))
    })
}

/// The JSON object of a create or update body: JSON, or the protobuf envelope for a built-in
/// type (415 for a custom resource, which kube-apiserver reads as JSON or YAML only).
pub(crate) fn read_body(
    info: &ResourceInfo,
    media: &str,
    body: &[u8],
) -> Result<Value, StatusError> {
    if !media.eq_ignore_ascii_case(PROTOBUF) {
        return parse_body(body);
    }
    if !serves(info) {
        return Err(StatusError::unsupported_media_type(&[
            JSON,
            "application/yaml",
        ]));
    }
    #[cfg(feature = "protobuf")]
    {
        match crate::protobuf::decode_object(body) {
            Ok(value) => Ok(value),
            Err(Some(e)) => Err(StatusError::bad_request(format!(
                "the object provided is unrecognized: {e}"
            ))),
            Err(None) => Err(StatusError::bad_request(
                "the object provided is unrecognized: no kind is registered for the type in the protobuf envelope".to_owned(),
            )),
        }
    }
    #[cfg(not(feature = "protobuf"))]
    unreachable!("serves() is false without the protobuf feature")
}

/// A response with a JSON body.
pub(crate) fn json_response(code: StatusCode, body: impl Into<Body>) -> Response {
    let mut response = Response::new(body.into());
    *response.status_mut() = code;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// A response with a JSON value as its body.
fn value_response(code: StatusCode, value: &Value) -> Response {
    json_response(code, value.to_string())
}

impl IntoResponse for StatusError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = value_response(code, &self.to_json());
        if let Some(seconds) = self.retry_after_seconds() {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

/// The response of an injected [`Failure`].
pub(crate) fn failure_response(failure: Failure) -> Response {
    match failure {
        Failure::Status(status) => status.into_response(),
        Failure::PlainText {
            code,
            body,
            retry_after,
            close,
        } => {
            let mut response = Response::new(Body::from(body));
            *response.status_mut() =
                StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let headers = response.headers_mut();
            headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            );
            if let Some(seconds) = retry_after {
                headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
            }
            if close {
                headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            response
        }
    }
}

#[cfg(feature = "protobuf")]
fn protobuf_response(code: StatusCode, bytes: Vec<u8>) -> Response {
    let mut response = Response::new(Body::from(bytes));
    *response.status_mut() = code;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(PROTOBUF));
    response
}

/// A response carrying a JSON document (object, list, status), re-encoded when protobuf was
/// negotiated.
pub(crate) fn body_response(
    code: StatusCode,
    json: impl AsRef<[u8]> + Into<Body>,
    output: Output,
) -> Response {
    #[cfg(feature = "protobuf")]
    if output == Output::Protobuf
        && let Some(bytes) = serde_json::from_slice::<Value>(json.as_ref())
            .ok()
            .and_then(|v| crate::protobuf::encode_object(&v))
    {
        return protobuf_response(code, bytes);
    }
    let _ = output;
    json_response(code, json)
}

/// A list response: the protobuf document as it is, the JSON one as [`body_response`] sends it.
pub(crate) fn list_response(listed: crate::list::Listed, output: Output) -> Response {
    match listed {
        crate::list::Listed::Json(json) => body_response(StatusCode::OK, json, output),
        #[cfg(feature = "protobuf")]
        crate::list::Listed::Protobuf(bytes) => protobuf_response(StatusCode::OK, bytes),
    }
}

/// An error as a `Status`, in the negotiated encoding.
pub(crate) fn status_response(status: StatusError, output: Output) -> Response {
    if output == Output::Json {
        return status.into_response();
    }
    let code = StatusCode::from_u16(status.code()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = body_response(code, status.to_json().to_string().into_bytes(), output);
    if let Some(seconds) = status.retry_after_seconds() {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    response
}
