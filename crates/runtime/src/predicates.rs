//! Predicates for [`Controller::predicate`](crate::Controller::predicate): which
//! updates of a main object are worth a reconcile.
//!
//! ```
//! use informer_runtime::predicates::{generation_changed, labels_changed};
//! use k8s_openapi::api::apps::v1::Deployment;
//!
//! // A spec change (a new generation) or a label change; not a status the controller wrote.
//! let predicate = |old: &Deployment, new: &Deployment| {
//!     generation_changed(old, new) || labels_changed(old, new)
//! };
//! # let _ = predicate;
//! ```

use kube::Resource;

/// Whether `metadata.generation` changed: the API server bumps it on a change of the spec (for
/// most types, and for custom resources with the status subresource), not of the status or the
/// metadata. An object without a generation (either version) passes: a type that does not keep
/// one would otherwise never be reconciled on an update.
pub fn generation_changed<K: Resource>(old: &K, new: &K) -> bool {
    match (old.meta().generation, new.meta().generation) {
        (Some(a), Some(b)) => a != b,
        _ => true,
    }
}

/// Whether `metadata.labels` changed (no labels and an empty map are the same).
pub fn labels_changed<K: Resource>(old: &K, new: &K) -> bool {
    non_empty(&old.meta().labels) != non_empty(&new.meta().labels)
}

/// Whether `metadata.annotations` changed (none and an empty map are the same).
pub fn annotations_changed<K: Resource>(old: &K, new: &K) -> bool {
    non_empty(&old.meta().annotations) != non_empty(&new.meta().annotations)
}

/// Whether `metadata.finalizers` changed (none and an empty list are the same), or the object
/// was marked for deletion: the two changes a finalizer-holding controller must see.
pub fn finalizers_changed<K: Resource>(old: &K, new: &K) -> bool {
    let (o, n) = (old.meta(), new.meta());
    o.finalizers.as_deref().unwrap_or_default() != n.finalizers.as_deref().unwrap_or_default()
        || o.deletion_timestamp.is_some() != n.deletion_timestamp.is_some()
}

fn non_empty<T: Default + PartialEq>(map: &Option<T>) -> Option<&T> {
    map.as_ref().filter(|m| **m != T::default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::json;

    fn pod(meta: serde_json::Value) -> Pod {
        serde_json::from_value(json!({ "metadata": meta })).unwrap()
    }

    #[test]
    fn each_predicate_sees_its_own_change_only() {
        let base = pod(json!({"name": "p", "generation": 1, "labels": {"a": "1"}}));
        let status_only = pod(json!({"name": "p", "generation": 1, "labels": {"a": "1"},
                                     "resourceVersion": "9"}));
        for (name, p) in [
            (
                "generation",
                generation_changed::<Pod> as fn(&Pod, &Pod) -> bool,
            ),
            ("labels", labels_changed),
            ("annotations", annotations_changed),
            ("finalizers", finalizers_changed),
        ] {
            assert!(
                !p(&base, &status_only),
                "{name}: nothing it watches changed"
            );
        }
        let spec = pod(json!({"name": "p", "generation": 2, "labels": {"a": "1"}}));
        assert!(generation_changed(&base, &spec) && !labels_changed(&base, &spec));
        let relabelled = pod(json!({"name": "p", "generation": 1, "labels": {"a": "2"}}));
        assert!(labels_changed(&base, &relabelled) && !generation_changed(&base, &relabelled));
        let annotated = pod(json!({"name": "p", "generation": 1, "labels": {"a": "1"},
                                   "annotations": {"n": "x"}}));
        assert!(annotations_changed(&base, &annotated));
        let held = pod(json!({"name": "p", "generation": 1, "labels": {"a": "1"},
                              "finalizers": ["f"]}));
        assert!(finalizers_changed(&base, &held));
        let deleting = pod(json!({"name": "p", "generation": 1, "labels": {"a": "1"},
                                  "finalizers": ["f"],
                                  "deletionTimestamp": "2026-01-01T00:00:00Z"}));
        assert!(finalizers_changed(&held, &deleting));
    }

    #[test]
    fn absent_and_empty_are_the_same_and_no_generation_passes() {
        let bare = pod(json!({"name": "p"}));
        let empty = pod(json!({"name": "p", "labels": {}, "annotations": {}, "finalizers": []}));
        assert!(!labels_changed(&bare, &empty));
        assert!(!annotations_changed(&bare, &empty));
        assert!(!finalizers_changed(&bare, &empty));
        assert!(generation_changed(&bare, &bare), "no generation: passes");
    }
}
