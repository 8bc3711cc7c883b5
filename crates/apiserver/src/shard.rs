//! `shardSelector` (server-side sharded list and watch, KEP-5866): which objects a list or
//! watch keeps, and what its list says it applied.
//!
//! The selector is parsed and written by `informer-shard`, the crate clients shard with, so the
//! server and its clients agree on the hash and the grammar by construction. Like kube-apiserver,
//! the simulator decodes the parameter with the list options, before it validates them: a
//! malformed selector is a `400 BadRequest` (`invalid shard selector: <why>`) even where the
//! other options would be a `422`.

use informer_shard::ShardSelector;
use serde_json::Value;

use crate::config::ShardSelectorSupport;
use crate::status::StatusError;

/// The shard selector of a list or watch, parsed.
#[derive(Clone, Debug)]
pub(crate) struct ShardFilter(ShardSelector);

impl ShardFilter {
    /// The request's `shardSelector` (`raw`) as this server takes it: `None` when there is
    /// none (absent and empty are alike) or the server ignores it; a `400` when it does not
    /// parse.
    pub(crate) fn decode(
        raw: &str,
        support: ShardSelectorSupport,
    ) -> Result<Option<Self>, StatusError> {
        if raw.is_empty() || support == ShardSelectorSupport::Ignored {
            return Ok(None);
        }
        raw.parse::<ShardSelector>()
            .map(|selector| Some(ShardFilter(selector)))
            .map_err(|e| StatusError::bad_request(format!("invalid shard selector: {e}")))
    }

    /// Whether `object` (its JSON) is selected: the hash of its field (`""` when it has none,
    /// as a cluster-scoped object's namespace) is in a range.
    pub(crate) fn matches(&self, object: &Value) -> bool {
        let value = object
            .get("metadata")
            .and_then(|m| m.get(self.0.field().metadata_key()))
            .and_then(Value::as_str)
            .unwrap_or("");
        self.0.matches(value)
    }

    /// The list metadata's `shardInfo`: the selector applied, in its canonical form (what the
    /// request sent, when it sent the canonical form).
    pub(crate) fn info(&self) -> Value {
        serde_json::json!({ "selector": self.0.to_string() })
    }
}

/// Whether `object` passes `filter` (no filter passes all).
pub(crate) fn selects(filter: Option<&ShardFilter>, object: &Value) -> bool {
    filter.is_none_or(|f| f.matches(object))
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOWER: &str =
        "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')";

    #[test]
    fn absent_empty_and_ignored_selectors_select_everything() {
        let served = ShardSelectorSupport::Served;
        assert!(ShardFilter::decode("", served).unwrap().is_none());
        assert!(
            ShardFilter::decode("garbage", ShardSelectorSupport::Ignored)
                .unwrap()
                .is_none()
        );
        let err = ShardFilter::decode("   ", served).unwrap_err();
        assert_eq!((err.code(), err.reason()), (400, "BadRequest"));
        assert!(
            err.message().starts_with("invalid shard selector: "),
            "{err}"
        );
    }

    #[test]
    fn objects_are_selected_by_the_hash_of_their_field() {
        let filter = ShardFilter::decode(LOWER, ShardSelectorSupport::Served)
            .unwrap()
            .unwrap();
        // A uid of each half of the hash space.
        let lower = (0..64)
            .map(|i| format!("{i:08x}-0000-4000-8000-000000000000"))
            .find(|u| informer_shard::hash(u) < 1 << 63)
            .unwrap();
        let upper = (0..64)
            .map(|i| format!("{i:08x}-0000-4000-8000-000000000000"))
            .find(|u| informer_shard::hash(u) >= 1 << 63)
            .unwrap();
        assert!(filter.matches(&serde_json::json!({"metadata": {"uid": lower}})));
        assert!(!filter.matches(&serde_json::json!({"metadata": {"uid": upper}})));
        assert!(selects(None, &serde_json::json!({})));
        assert_eq!(filter.info(), serde_json::json!({ "selector": LOWER }));
    }
}
