//! Isolating one client ([`Faults::isolate`](crate::Faults::isolate)): who a request is from,
//! and the gate every request of an isolated client stops at.

use std::io;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::body::Body;
use axum::http::{HeaderMap, header};
use axum::response::Response;
use bytes::Bytes;

use crate::codec::failure_response;
use crate::faults::Isolation;
use crate::state::Shared;

/// The client a request is from, as kube-apiserver's bearer-token authenticator reads it: the
/// token of `Authorization: Bearer <token>` (the scheme in any case, surrounding spaces
/// trimmed). A request without one is identified by its `User-Agent`, if it has one.
pub(crate) fn client_of(headers: &HeaderMap) -> Option<String> {
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer_token);
    if let Some(token) = token {
        return Some(token.to_owned());
    }
    headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .filter(|ua| !ua.is_empty())
        .map(str::to_owned)
}

/// The token of an `Authorization` value `Bearer <token>`: the second space-separated part,
/// non-empty (a third part is ignored, as the authenticator ignores it).
fn bearer_token(value: &str) -> Option<&str> {
    let mut parts = value.trim().splitn(3, ' ');
    let scheme = parts.next()?;
    let token = parts.next()?;
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// Counts a request held for a hung client while it is held.
struct Held(Arc<Shared>);

impl Held {
    fn new(shared: &Arc<Shared>) -> Self {
        shared.held_requests.fetch_add(1, Ordering::SeqCst);
        Held(shared.clone())
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.0.held_requests.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A response that never reaches the client: its body fails before its head is written, so
/// the server closes the connection without an answer.
fn dropped_connection() -> Response {
    let failed = futures::stream::once(async {
        Err::<Bytes, _>(io::Error::new(
            io::ErrorKind::ConnectionAborted,
            "connection dropped by fault injection",
        ))
    });
    Response::new(Body::from_stream(failed))
}

impl Shared {
    /// The gate a request of `client` passes before it is served: `None` to serve it, or the
    /// answer of an isolated client. A hung client's request waits here until the client is
    /// healed (then it is served) or isolated to fail (then it fails); a shutdown or a restart
    /// drops it.
    pub(crate) async fn isolation_gate(self: &Arc<Self>, client: &str) -> Option<Response> {
        let mut changes = self.isolation.subscribe();
        let restarts = self.faults.lock().restarts;
        let mut held = None;
        loop {
            // Mark the current generation seen before reading the state it guards: a change
            // after the read wakes the wait below.
            changes.borrow_and_update();
            let isolation = {
                let faults = self.faults.lock();
                if faults.restarts != restarts {
                    return Some(dropped_connection());
                }
                faults.isolated.get(client).cloned()
            };
            match isolation {
                None => return None,
                Some(Isolation::Fail(failure)) => return Some(failure_response(failure)),
                Some(Isolation::Hang) => {
                    held.get_or_insert_with(|| Held::new(self));
                    tokio::select! {
                        changed = changes.changed() => {
                            if changed.is_err() {
                                return Some(dropped_connection());
                            }
                        }
                        () = self.shutdown.cancelled() => return Some(dropped_connection()),
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(header::HeaderName, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(name.clone(), HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn a_client_is_its_bearer_token_else_its_user_agent() {
        let both = headers(&[
            (header::AUTHORIZATION, "Bearer secret-a"),
            (header::USER_AGENT, "kubectl/v1.36"),
        ]);
        assert_eq!(client_of(&both).as_deref(), Some("secret-a"));
        let ua = headers(&[(header::USER_AGENT, "kubectl/v1.36")]);
        assert_eq!(client_of(&ua).as_deref(), Some("kubectl/v1.36"));
        assert_eq!(client_of(&HeaderMap::new()), None);
        // Basic credentials are not a bearer token: the User-Agent identifies the client.
        let basic = headers(&[
            (header::AUTHORIZATION, "Basic dTpw"),
            (header::USER_AGENT, "ua"),
        ]);
        assert_eq!(client_of(&basic).as_deref(), Some("ua"));
    }

    #[test]
    fn bearer_tokens_are_read_as_the_authenticator_reads_them() {
        assert_eq!(bearer_token("Bearer abc"), Some("abc"));
        assert_eq!(bearer_token("  bearer abc  "), Some("abc"));
        assert_eq!(bearer_token("BEARER abc extra"), Some("abc"));
        assert_eq!(bearer_token("Bearer "), None);
        assert_eq!(bearer_token("Bearer"), None);
        assert_eq!(bearer_token("Token abc"), None);
    }
}
