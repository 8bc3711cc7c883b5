//! Mapping kube-client's errors and statuses onto the reflector's [`Error`] and [`Status`].

use std::error::Error as StdError;
use std::io;
use std::time::Duration;

use informer_reflector::{Error, Status, StatusCause};

/// The reflector's [`Status`] for a kube-client `Status` (an HTTP error body or an `ERROR`
/// event's object).
///
/// A status without a code keeps 0; the reflector then classifies it by its reason alone. An
/// `ERROR` event whose object was not a `Status` at all (e.g. `{}`) arrives from kube-client as an
/// empty status, and so maps to code 0 with no reason: an unknown error.
pub fn status_from_kube(status: &kube::core::Status) -> Status {
    let details = status.details.as_ref();
    Status {
        code: status.code,
        reason: status.reason.clone(),
        message: status.message.clone(),
        retry_after: details
            .map(|d| d.retry_after_seconds)
            .filter(|secs| *secs > 0)
            .map(|secs| Duration::from_secs(u64::from(secs))),
        causes: details
            .map(|d| {
                d.causes
                    .iter()
                    .map(|c| StatusCause {
                        reason: c.reason.clone(),
                        message: c.message.clone(),
                        field: c.field.clone(),
                    })
                    .collect()
            })
            .unwrap_or_default(),
    }
}

/// The reflector's [`Error`] for a kube-client error.
///
/// * `Api` (a non-2xx response, or a watch line that was a bare `Status`) → [`Error::Api`]. A
///   plain-text error body (a proxy's 429, a bare 404) has already been turned into a status
///   with the HTTP code by kube-client, so a plain-text 410 is still Expired and a plain-text 429
///   still TooManyRequests (without Retry-After: kube-client drops the header).
/// * A connection refused anywhere in the source chain → [`Error::ConnectionRefused`].
/// * Other transport and I/O failures → [`Error::Transport`].
/// * JSON that does not decode, or a watch line that is not UTF-8 → [`Error::Decode`].
pub fn error_from_kube(err: kube::Error) -> Error {
    match err {
        kube::Error::Api(status) => Error::Api(status_from_kube(&status)),
        kube::Error::SerdeError(e) => Error::Decode {
            message: "invalid JSON".to_owned(),
            source: Some(Box::new(e)),
        },
        kube::Error::FromUtf8(e) => Error::Decode {
            message: "response is not UTF-8".to_owned(),
            source: Some(Box::new(e)),
        },
        kube::Error::LinesCodecMaxLineLengthExceeded => {
            Error::decode("watch line longer than the decoder's limit")
        }
        // The line decoder reports a line that is not UTF-8 as invalid data: a bad line, not a
        // broken connection.
        kube::Error::ReadEvents(e) if e.kind() == io::ErrorKind::InvalidData => Error::Decode {
            message: "watch line is not UTF-8".to_owned(),
            source: Some(Box::new(e)),
        },
        kube::Error::ReadEvents(e) => Error::Transport(Box::new(e)),
        other if is_connection_refused(&other) => Error::ConnectionRefused(Box::new(other)),
        kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::HttpError(_) => {
            Error::Transport(Box::new(err))
        }
        other => Error::Other(Box::new(other)),
    }
}

/// Whether an `io::ErrorKind::ConnectionRefused` appears anywhere in the error's source chain.
fn is_connection_refused(err: &(dyn StdError + 'static)) -> bool {
    let mut current: Option<&(dyn StdError + 'static)> = Some(err);
    while let Some(e) = current {
        if let Some(io) = e.downcast_ref::<io::Error>()
            && io.kind() == io::ErrorKind::ConnectionRefused
        {
            return true;
        }
        // hyper-util's legacy client error hides its cause behind `source()`, which the loop
        // follows; its Display also names it.
        current = e.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use informer_reflector::ErrorKind;
    use kube::core::response::{StatusCause as KubeCause, StatusDetails};

    fn kube_status(code: u16, reason: &str) -> kube::core::Status {
        let mut s = kube::core::Status::failure("msg", reason);
        s.code = code;
        s
    }

    #[test]
    fn statuses_keep_code_reason_retry_after_and_causes() {
        let mut s = kube_status(504, "Timeout");
        s.details = Some(StatusDetails {
            name: String::new(),
            group: String::new(),
            kind: String::new(),
            uid: String::new(),
            causes: vec![KubeCause {
                reason: "ResourceVersionTooLarge".into(),
                message: "Too large resource version".into(),
                field: String::new(),
            }],
            retry_after_seconds: 1,
        });
        let mapped = status_from_kube(&s);
        assert_eq!(mapped.code, 504);
        assert_eq!(mapped.retry_after, Some(Duration::from_secs(1)));
        assert_eq!(mapped.kind(), ErrorKind::TooLargeResourceVersion);
    }

    #[test]
    fn api_errors_are_classified() {
        let expired = error_from_kube(kube::Error::Api(kube_status(410, "Expired").boxed()));
        assert!(expired.is_expired());
        // kube-client's reconstruction of a plain-text 410 body.
        let plain =
            kube::core::Status::failure("gone", "Failed to parse error data").with_code(410);
        assert!(error_from_kube(kube::Error::Api(plain.boxed())).is_expired());
        let plain_429 =
            kube::core::Status::failure("Too many requests", "Failed to parse error data")
                .with_code(429);
        assert_eq!(
            error_from_kube(kube::Error::Api(plain_429.boxed())).kind(),
            ErrorKind::TooManyRequests { retry_after: None }
        );
    }

    #[test]
    fn connection_refused_is_found_in_the_source_chain() {
        let io = io::Error::new(io::ErrorKind::ConnectionRefused, "refused");
        let err = kube::Error::Service(Box::new(io));
        assert_eq!(error_from_kube(err).kind(), ErrorKind::ConnectionRefused);

        #[derive(Debug)]
        struct Wrapper(io::Error);
        impl std::fmt::Display for Wrapper {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("client error (Connect)")
            }
        }
        impl StdError for Wrapper {
            fn source(&self) -> Option<&(dyn StdError + 'static)> {
                Some(&self.0)
            }
        }
        let nested = kube::Error::Service(Box::new(Wrapper(io::Error::new(
            io::ErrorKind::ConnectionRefused,
            "refused",
        ))));
        assert_eq!(error_from_kube(nested).kind(), ErrorKind::ConnectionRefused);

        let reset = kube::Error::Service(Box::new(io::Error::new(
            io::ErrorKind::ConnectionReset,
            "reset",
        )));
        assert!(matches!(error_from_kube(reset), Error::Transport(_)));
    }

    #[test]
    fn decode_failures_are_decode_errors() {
        let e = serde_json::from_str::<u32>("{").unwrap_err();
        let mapped = error_from_kube(kube::Error::SerdeError(e));
        assert!(matches!(mapped, Error::Decode { .. }));
        assert_eq!(mapped.kind(), ErrorKind::InternalError);
    }

    #[test]
    fn mapped_errors_display_the_kube_error_they_wrap() {
        let serde = serde_json::from_str::<serde_json::Value>("{").unwrap_err();
        let serde_text = serde.to_string();
        let mapped = error_from_kube(kube::Error::SerdeError(serde));
        let shown = mapped.to_string();
        assert!(shown.contains(&serde_text), "{shown:?}");
        assert!(StdError::source(&mapped).is_some());

        let io = io::Error::new(io::ErrorKind::ConnectionReset, "reset by peer");
        let mapped = error_from_kube(kube::Error::ReadEvents(io));
        assert!(matches!(mapped, Error::Transport(_)));
        assert!(mapped.to_string().contains("reset by peer"), "{mapped}");

        let refused = io::Error::new(
            io::ErrorKind::ConnectionRefused,
            "connection refused (os 111)",
        );
        let mapped = error_from_kube(kube::Error::ReadEvents(refused));
        assert!(mapped.to_string().contains("os 111"), "{mapped}");
    }
}
