//! Query-string parsing for list and watch (`metav1.ListOptions`), with kube-apiserver's
//! boolean rules and its validation (`ValidateListOptions`).

use crate::config::ShardSelectorSupport;
use crate::shard::ShardFilter;
use crate::status::{FieldError, StatusError};
use crate::storage::RvCodec;

/// `resourceVersion` as a request gives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RequestedRv {
    /// Absent or empty: most recent (consistent).
    Unset,
    /// `"0"`: any.
    Zero,
    /// A revision.
    At(u64),
}

/// The list/watch options of one request, still as strings where validation needs them.
#[derive(Clone, Debug, Default)]
pub(crate) struct ListOptions {
    pub(crate) watch: bool,
    pub(crate) label_selector: String,
    pub(crate) field_selector: String,
    pub(crate) limit: Option<i64>,
    pub(crate) continue_token: String,
    pub(crate) resource_version: String,
    pub(crate) resource_version_match: String,
    pub(crate) allow_watch_bookmarks: bool,
    pub(crate) timeout_seconds: Option<i64>,
    pub(crate) send_initial_events: Option<bool>,
    /// `shardSelector` as sent.
    pub(crate) shard_selector: String,
    /// `shardSelector` decoded (see [`ListOptions::decode_shard_selector`]); `None` selects all.
    pub(crate) shard: Option<ShardFilter>,
}

/// kube-apiserver's query bool: absent is false; `0`/`false` (any case) is false; anything
/// else, even empty, is true.
pub(crate) fn parse_bool(value: &str) -> bool {
    !(value == "0" || value.eq_ignore_ascii_case("false"))
}

fn parse_int(name: &str, value: &str) -> Result<i64, StatusError> {
    value.trim().parse::<i64>().map_err(|_| {
        StatusError::bad_request(format!(
            "invalid value {value:?} for query parameter {name}: strconv.ParseInt: parsing {value:?}: invalid syntax"
        ))
    })
}

impl ListOptions {
    pub(crate) fn parse(query: &str) -> Result<Self, StatusError> {
        let mut o = ListOptions::default();
        for (k, v) in form_urlencoded::parse(query.as_bytes()) {
            match k.as_ref() {
                "watch" => o.watch = parse_bool(&v),
                "labelSelector" => o.label_selector = v.into_owned(),
                "fieldSelector" => o.field_selector = v.into_owned(),
                "limit" => o.limit = Some(parse_int("limit", &v)?),
                "continue" => o.continue_token = v.into_owned(),
                "resourceVersion" => o.resource_version = v.into_owned(),
                "resourceVersionMatch" => o.resource_version_match = v.into_owned(),
                "allowWatchBookmarks" => o.allow_watch_bookmarks = parse_bool(&v),
                "timeoutSeconds" => o.timeout_seconds = Some(parse_int("timeoutSeconds", &v)?),
                "sendInitialEvents" => o.send_initial_events = Some(parse_bool(&v)),
                "shardSelector" => o.shard_selector = v.into_owned(),
                _ => {}
            }
        }
        Ok(o)
    }

    /// Decodes `shardSelector` as a server with `support` does, as kube-apiserver decodes the
    /// list options of a list, watch or collection delete: before [`ListOptions::validate`], a
    /// malformed one a `400`.
    pub(crate) fn decode_shard_selector(
        &mut self,
        support: ShardSelectorSupport,
    ) -> Result<(), StatusError> {
        self.shard = ShardFilter::decode(&self.shard_selector, support)?;
        Ok(())
    }

    /// The parsed `resourceVersion` (400 when it is not one `codec` writes).
    pub(crate) fn requested_rv(&self, codec: RvCodec) -> Result<RequestedRv, StatusError> {
        match self.resource_version.as_str() {
            "" => Ok(RequestedRv::Unset),
            "0" => Ok(RequestedRv::Zero),
            s => codec.decode(s).map(RequestedRv::At).ok_or_else(|| {
                StatusError::bad_request(format!(
                    "invalid resource version {s:?}: strconv.ParseUint: parsing {s:?}: invalid syntax"
                ))
            }),
        }
    }

    /// `ValidateListOptions` / `validateWatchOptions` (422 `Invalid`).
    pub(crate) fn validate(&self) -> Result<(), StatusError> {
        let mut errs = if self.watch {
            self.watch_errors()
        } else {
            self.list_errors()
        };
        if let Some(limit) = self.limit
            && limit < 0
        {
            errs.push(FieldError::invalid(
                "limit",
                &limit.to_string(),
                "must be greater than or equal to 0",
            ));
        }
        if errs.is_empty() {
            Ok(())
        } else {
            Err(StatusError::invalid_list_options(errs))
        }
    }

    /// `validateWatchOptions`: `resourceVersionMatch` only as `NotOlderThan`, with
    /// `sendInitialEvents`, and without `continue`.
    fn watch_errors(&self) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let m = self.resource_version_match.as_str();
        if self.send_initial_events.is_some() && m != "NotOlderThan" {
            errs.push(FieldError::forbidden(
                "resourceVersionMatch",
                "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            ));
        }
        if !m.is_empty() {
            if self.send_initial_events.is_none() {
                errs.push(FieldError::forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
                ));
            }
            if m != "NotOlderThan" {
                errs.push(FieldError::not_supported(
                    "resourceVersionMatch",
                    m,
                    &["NotOlderThan"],
                ));
            }
            if !self.continue_token.is_empty() {
                errs.push(FieldError::forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch is forbidden when continue is provided",
                ));
            }
        }
        errs
    }

    /// `ValidateListOptions`: `resourceVersionMatch` only with `resourceVersion`, without
    /// `continue`, and not `Exact` at `"0"`; no `sendInitialEvents`.
    fn list_errors(&self) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let m = self.resource_version_match.as_str();
        if !m.is_empty() {
            if self.resource_version.is_empty() {
                errs.push(FieldError::forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch is forbidden unless resourceVersion is provided",
                ));
            }
            if !self.continue_token.is_empty() {
                errs.push(FieldError::forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch is forbidden when continue is provided",
                ));
            }
            if m != "Exact" && m != "NotOlderThan" {
                errs.push(FieldError::not_supported(
                    "resourceVersionMatch",
                    m,
                    &["Exact", "NotOlderThan", ""],
                ));
            }
            if m == "Exact" && self.resource_version == "0" {
                errs.push(FieldError::forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
                ));
            }
        }
        if self.send_initial_events.is_some() {
            errs.push(FieldError::forbidden(
                "sendInitialEvents",
                "sendInitialEvents is forbidden for list",
            ));
        }
        errs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn booleans_follow_the_server_rules() {
        for (q, watch) in [
            ("watch", true),
            ("watch=", true),
            ("watch=1", true),
            ("watch=true", true),
            ("watch=yes", true),
            ("watch=0", false),
            ("watch=FALSE", false),
            ("", false),
        ] {
            assert_eq!(ListOptions::parse(q).unwrap().watch, watch, "{q}");
        }
        let o = ListOptions::parse("?&sendInitialEvents=false").unwrap();
        assert_eq!(o.send_initial_events, Some(false));
    }

    #[test]
    fn list_validation_matches_the_server() {
        let check = |q: &str| ListOptions::parse(q).unwrap().validate();
        assert!(check("resourceVersion=5&resourceVersionMatch=Exact").is_ok());
        let err = check("resourceVersionMatch=Exact").unwrap_err();
        assert_eq!(err.code(), 422);
        assert_eq!(
            err.message(),
            "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: \
             resourceVersionMatch is forbidden unless resourceVersion is provided"
        );
        let err = check("resourceVersion=0&resourceVersionMatch=Exact&continue=x").unwrap_err();
        assert!(
            err.message().contains("[resourceVersionMatch: Forbidden"),
            "{err}"
        );
        assert!(check("resourceVersion=1&resourceVersionMatch=Newest").is_err());
        assert!(check("sendInitialEvents=true").is_err());
        assert!(check("watch=1&sendInitialEvents=true").is_err());
        assert!(check("watch=1&resourceVersionMatch=NotOlderThan").is_err());
        assert!(check("watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan").is_ok());
        assert_eq!(ListOptions::parse("limit=x").unwrap_err().code(), 400);
        assert_eq!(
            ListOptions::parse("resourceVersion=abc")
                .unwrap()
                .requested_rv(RvCodec::default())
                .unwrap_err()
                .code(),
            400
        );
    }
}
