//! The `shardSelector` of a list or watch request (KEP-5866), which kube-client's request
//! builder does not know: appended to the query the builder wrote, and the server's refusal of
//! it told apart from other errors.

use informer_reflector::{Error, Status};

/// Appends `shardSelector=<selector>` to `req`'s query (nothing without a selector).
pub(crate) fn append_shard_selector<B>(
    req: &mut http::Request<B>,
    selector: Option<&str>,
) -> Result<(), Error> {
    let Some(selector) = selector.filter(|s| !s.is_empty()) else {
        return Ok(());
    };
    let mut uri = req.uri().to_string();
    uri.push(if uri.contains('?') { '&' } else { '?' });
    uri.push_str("shardSelector=");
    percent_encode_into(&mut uri, selector);
    *req.uri_mut() = uri.parse().map_err(|e| Error::Other(Box::new(e)))?;
    Ok(())
}

/// `value` percent-encoded as a query value: every byte but the unreserved ones
/// (`A-Z a-z 0-9 - . _ ~`) written as `%XX`.
fn percent_encode_into(out: &mut String, value: &str) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0xf)]));
        }
    }
}

/// `err`, or [`Error::ShardSelectorRefused`] when it is the server's `400` about the shard
/// selector that was sent (`selector`): kube-apiserver's message names it ("invalid shard
/// selector: …").
pub(crate) fn shard_refusal(err: Error, selector: Option<&str>) -> Error {
    match (err, selector) {
        (Error::Api(status), Some(selector)) if is_shard_refusal(&status) => {
            Error::ShardSelectorRefused {
                selector: selector.to_owned(),
                status,
            }
        }
        (err, _) => err,
    }
}

fn is_shard_refusal(status: &Status) -> bool {
    status.code == 400
        && status
            .message
            .to_ascii_lowercase()
            .contains("shard selector")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_selector_is_appended_encoded_after_the_query_or_as_the_query() {
        let selector =
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')";
        let mut req = http::Request::get("/api/v1/pods?limit=5").body(()).unwrap();
        append_shard_selector(&mut req, Some(selector)).unwrap();
        let query = req.uri().query().unwrap();
        assert_eq!(
            query,
            "limit=5&shardSelector=shardRange%28object.metadata.uid%2C%20%270x0000000000000000%27%2C%20%270x8000000000000000%27%29"
        );
        let mut bare = http::Request::get("/api/v1/pods").body(()).unwrap();
        append_shard_selector(&mut bare, Some("a || b")).unwrap();
        assert_eq!(bare.uri().query(), Some("shardSelector=a%20%7C%7C%20b"));
        let mut none = http::Request::get("/api/v1/pods").body(()).unwrap();
        append_shard_selector(&mut none, None).unwrap();
        assert_eq!(none.uri().query(), None);
    }

    #[test]
    fn only_a_400_about_the_shard_selector_sent_is_a_refusal_of_it() {
        let bad = || Error::Api(Status::new(400, "BadRequest", "invalid shard selector: x"));
        assert!(matches!(
            shard_refusal(bad(), Some("s")),
            Error::ShardSelectorRefused { ref selector, .. } if selector == "s"
        ));
        assert!(matches!(shard_refusal(bad(), None), Error::Api(_)));
        let labels = Error::Api(Status::new(
            400,
            "BadRequest",
            "unable to parse requirement",
        ));
        assert!(matches!(shard_refusal(labels, Some("s")), Error::Api(_)));
    }
}
