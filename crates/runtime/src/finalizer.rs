//! A finalizer for a reconciler: cleanup that runs before Kubernetes lets an object go (see
//! [`finalizer`]).

use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;

use crate::Action;
use kube::api::{Patch, PatchParams};
use kube::{Api, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// What [`finalizer`] asks of the reconcile.
#[derive(Debug)]
pub enum Finalize<K> {
    /// The object is live: bring the world to what it says.
    Apply(Arc<K>),
    /// The object is being deleted: undo what `Apply` did. The finalizer is removed once this
    /// succeeds; while it fails, the object stays.
    Cleanup(Arc<K>),
}

/// Why [`finalizer`] failed.
#[derive(Debug, thiserror::Error)]
pub enum FinalizerError<E>
where
    E: std::error::Error + 'static,
{
    /// The reconcile of a live object failed.
    #[error("the reconcile failed: {0}")]
    Apply(#[source] E),
    /// The cleanup of an object being deleted failed; the finalizer stays.
    #[error("the cleanup failed: {0}")]
    Cleanup(#[source] E),
    /// Adding the finalizer failed (a `422` when the object changed meanwhile).
    #[error("adding the finalizer failed: {0}")]
    Add(#[source] kube::Error),
    /// Removing the finalizer failed (a `422` when the object changed meanwhile).
    #[error("removing the finalizer failed: {0}")]
    Remove(#[source] kube::Error),
    /// The object has no `metadata.name`, so it cannot be patched.
    #[error("the object has no name")]
    Unnamed,
}

/// Runs `reconcile` for `obj` behind the finalizer `name` (a qualified name such as
/// `example.com/cleanup`), adding and removing the finalizer through `api`. Returns the
/// reconcile's [`Action`], or [`Action::await_change`] when it only wrote the finalizer or had
/// nothing to do.
///
/// A reconcile that creates something outside the object's own garbage collection (a cloud
/// resource, a row in a database, a child in another namespace) must undo it when the object
/// is deleted. The deletion's event can be missed (the controller down, a relist that never
/// saw the object); a finalizer, a name in `metadata.finalizers`, holds the object in the API
/// server, marked for deletion, until the controller has cleaned up and removed its name.
///
/// | the object | what happens |
/// |---|---|
/// | not being deleted, without the finalizer | the finalizer is added, and nothing else: the change wakes the object again |
/// | not being deleted, with the finalizer | `reconcile(Finalize::Apply(obj))` |
/// | being deleted, with the finalizer | `reconcile(Finalize::Cleanup(obj))`; once it succeeds, the finalizer is removed |
/// | being deleted, without it | nothing: the cleanup is done |
///
/// The writes are JSON patches that first `test` the finalizers they change, so that a write
/// based on a stale object fails (`422`, [`FinalizerError::Add`] or
/// [`FinalizerError::Remove`]) instead of overwriting another controller's finalizers; the
/// reconcile then runs again on the newer object. A cleanup can therefore run more than once
/// (its finalizer's removal failed, the controller stopped in between, or the reconcile read a
/// stale copy of an object whose cleanup had already run): make it idempotent. A removal that
/// finds the object gone (`404`) is a success: nothing holds it any more.
///
/// ```no_run
/// use std::sync::Arc;
/// use informer_runtime::{finalizer, Action, Finalize};
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use kube::Api;
///
/// # async fn run(api: Api<ConfigMap>, obj: Arc<ConfigMap>) -> Result<(), Box<dyn std::error::Error>> {
/// let action = finalizer(&api, "example.com/cleanup", obj, |step| async move {
///     match step {
///         Finalize::Apply(_cm) => { /* create what the object asks for */ }
///         Finalize::Cleanup(_cm) => { /* delete it again */ }
///     }
///     Ok::<_, std::io::Error>(Action::await_change())
/// })
/// .await?;
/// # Ok(()) }
/// ```
pub async fn finalizer<K, E, F, Fut>(
    api: &Api<K>,
    name: &str,
    obj: Arc<K>,
    reconcile: F,
) -> Result<Action, FinalizerError<E>>
where
    K: Resource + Clone + Debug + DeserializeOwned + Serialize,
    E: std::error::Error + 'static,
    F: FnOnce(Finalize<K>) -> Fut,
    Fut: Future<Output = Result<Action, E>>,
{
    let meta = obj.meta();
    let object = meta.name.clone().ok_or(FinalizerError::Unnamed)?;
    let finalizers = meta.finalizers.clone().unwrap_or_default();
    let at = finalizers.iter().position(|f| f == name);
    let deleting = meta.deletion_timestamp.is_some();
    match (deleting, at) {
        (false, Some(_)) => reconcile(Finalize::Apply(obj))
            .await
            .map_err(FinalizerError::Apply),
        (false, None) => {
            // Test what the object had, so that a stale object's write fails.
            let ops = if meta.finalizers.is_none() {
                json!([
                    {"op": "test", "path": "/metadata/finalizers", "value": null},
                    {"op": "add", "path": "/metadata/finalizers", "value": [name]},
                ])
            } else {
                json!([
                    {"op": "test", "path": "/metadata/finalizers", "value": finalizers},
                    {"op": "add", "path": "/metadata/finalizers/-", "value": name},
                ])
            };
            json_patch(api, &object, ops)
                .await
                .map_err(FinalizerError::Add)?;
            Ok(Action::await_change())
        }
        (true, Some(i)) => {
            let action = reconcile(Finalize::Cleanup(obj))
                .await
                .map_err(FinalizerError::Cleanup)?;
            let path = format!("/metadata/finalizers/{i}");
            let ops = json!([
                {"op": "test", "path": path, "value": name},
                {"op": "remove", "path": path},
            ]);
            match json_patch(api, &object, ops).await {
                // Gone: its last finalizer was removed already (a stale copy of an object
                // whose cleanup ran before), so nothing holds it any more.
                Ok(_) => Ok(action),
                Err(kube::Error::Api(status)) if status.code == 404 => Ok(action),
                Err(e) => Err(FinalizerError::Remove(e)),
            }
        }
        (true, None) => Ok(Action::await_change()),
    }
}

/// Sends `ops`, a JSON patch, for the object `name`.
async fn json_patch<K>(api: &Api<K>, name: &str, ops: Value) -> Result<K, kube::Error>
where
    K: Resource + Clone + Debug + DeserializeOwned,
{
    // The operations are built above in the shape a JSON patch has: they always decode.
    let patch = serde_json::from_value(ops).map_err(kube::Error::SerdeError)?;
    api.patch(name, &PatchParams::default(), &Patch::<()>::Json(patch))
        .await
}
