//! A [`Client`]'s writes: through kube-client's [`Api`], each answer's resource version (or a
//! deleted object's UID) recorded for the running reconcile.

use std::fmt::Debug;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::core::Status;
use serde::Serialize;

use super::{Client, ClientError, ClientObject, ObjectScope};
use crate::written::{self, WrittenCache};

/// The answer to [`Client::delete`].
#[derive(Debug, Clone)]
pub enum Deletion<K> {
    /// The server answered with the object: it is being deleted (finalizers hold it, or a
    /// grace period) or, for the types whose deletion answers with the final state (pods), it
    /// is gone.
    Object(K),
    /// The server answered with a `Status`: the object is gone.
    Gone(Box<Status>),
}

/// What a write's answer gives to wait for.
enum Answer {
    /// The resource version it carried, if any.
    Version(Option<String>),
    /// A deletion answered with a `Status`: the object at `key`, by UID if known.
    Gone { key: String, uid: Option<String> },
}

/// The resource version `obj` carries, if any.
fn version_of<K: ClientObject>(obj: &K) -> Option<String> {
    obj.meta()
        .resource_version
        .clone()
        .filter(|v| !v.is_empty())
}

/// The kind of `K`, for errors and logs.
fn kind<K: ClientObject>() -> String {
    K::kind(&()).into_owned()
}

impl Client {
    /// The api of `K` for an object named `name` in `namespace`.
    fn api<K: ClientObject>(
        &self,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Api<K>, ClientError> {
        <K::Scope as ObjectScope>::api(self.kube.clone(), namespace).ok_or_else(|| {
            ClientError::NoNamespace {
                kind: kind::<K>(),
                name: name.to_owned(),
            }
        })
    }

    /// The api of `obj`'s namespace, and its name (required).
    fn api_of<'a, K: ClientObject>(&self, obj: &'a K) -> Result<(Api<K>, &'a str), ClientError> {
        let name = obj
            .meta()
            .name
            .as_deref()
            .ok_or_else(|| ClientError::NoName { kind: kind::<K>() })?;
        Ok((self.api(obj.meta().namespace.as_deref(), name)?, name))
    }

    /// Creates `obj` in its namespace (`metadata.namespace`); `metadata.generateName` is
    /// honoured.
    pub async fn create<K: ClientObject>(
        &self,
        params: &PostParams,
        obj: &K,
    ) -> Result<K, ClientError> {
        let meta = obj.meta();
        let name = meta.name.as_deref().unwrap_or_default();
        let api = self.api::<K>(meta.namespace.as_deref(), name)?;
        let created = api.create(params, obj).await?;
        self.record(&api, name, Answer::Version(version_of(&created)))
            .await?;
        Ok(created)
    }

    /// Replaces `obj` (by its namespace and name) with itself: with its `resourceVersion`, the
    /// server refuses it with 409 Conflict if the object has changed since.
    pub async fn replace<K: ClientObject>(
        &self,
        params: &PostParams,
        obj: &K,
    ) -> Result<K, ClientError> {
        let (api, name) = self.api_of(obj)?;
        let replaced = api.replace(name, params, obj).await?;
        self.record(&api, name, Answer::Version(version_of(&replaced)))
            .await?;
        Ok(replaced)
    }

    /// Patches the object `namespace`/`name` (`None` for a cluster-scoped one) with any of
    /// kube's patches. A [`Patch::Apply`] refused with 409 Conflict is a
    /// [`ClientError::ApplyConflict`] (see also [`apply`](Self::apply)).
    pub async fn patch<K: ClientObject, P: Serialize + Debug>(
        &self,
        namespace: Option<&str>,
        name: &str,
        params: &PatchParams,
        patch: &Patch<P>,
    ) -> Result<K, ClientError> {
        let api = self.api::<K>(namespace, name)?;
        let patched = api.patch(name, params, patch).await;
        self.patched(&api, name, patch, patched).await
    }

    /// Applies `obj` server-side (by its namespace and name) as `field_manager`: the fields it
    /// sets become that manager's, the object is created if missing. Fields another manager
    /// owns make it a [`ClientError::ApplyConflict`] (see [`ClientError`] for what to do
    /// with one), unless `force` takes them over.
    pub async fn apply<K: ClientObject>(
        &self,
        obj: &K,
        field_manager: &str,
        force: bool,
    ) -> Result<K, ClientError> {
        let (api, name) = self.api_of(obj)?;
        let params = apply_params(field_manager, force);
        let patch = Patch::Apply(obj);
        let applied = api.patch(name, &params, &patch).await;
        self.patched(&api, name, &patch, applied).await
    }

    /// Patches the `/status` subresource of `namespace`/`name` (see [`patch`](Self::patch)).
    pub async fn patch_status<K: ClientObject, P: Serialize + Debug>(
        &self,
        namespace: Option<&str>,
        name: &str,
        params: &PatchParams,
        patch: &Patch<P>,
    ) -> Result<K, ClientError> {
        let api = self.api::<K>(namespace, name)?;
        let patched = api.patch_status(name, params, patch).await;
        self.patched(&api, name, patch, patched).await
    }

    /// Replaces the status of `obj` (by its namespace and name) through the `/status`
    /// subresource; the rest of `obj` is ignored by the server.
    pub async fn replace_status<K: ClientObject>(
        &self,
        params: &PostParams,
        obj: &K,
    ) -> Result<K, ClientError> {
        let (api, name) = self.api_of(obj)?;
        let replaced = api.replace_status(name, params, obj).await?;
        self.record(&api, name, Answer::Version(version_of(&replaced)))
            .await?;
        Ok(replaced)
    }

    /// Applies `obj`'s status server-side through the `/status` subresource, as
    /// [`apply`](Self::apply) does the object.
    pub async fn apply_status<K: ClientObject>(
        &self,
        obj: &K,
        field_manager: &str,
        force: bool,
    ) -> Result<K, ClientError> {
        let (api, name) = self.api_of(obj)?;
        let params = apply_params(field_manager, force);
        let patch = Patch::Apply(obj);
        let applied = api.patch_status(name, &params, &patch).await;
        self.patched(&api, name, &patch, applied).await
    }

    /// Deletes the object `namespace`/`name` (`None` for a cluster-scoped one). The next
    /// reconcile of the key waits until the cache shows the deletion: the object marked
    /// (finalizers, a grace period) or gone.
    pub async fn delete<K: ClientObject>(
        &self,
        namespace: Option<&str>,
        name: &str,
        params: &DeleteParams,
    ) -> Result<Deletion<K>, ClientError> {
        let api = self.api::<K>(namespace, name)?;
        let key = match namespace {
            Some(ns) if <K::Scope as ObjectScope>::NAMESPACED => format!("{ns}/{name}"),
            _ => name.to_owned(),
        };
        // The UID the cache has, should the answer not say.
        let cached = self.cache::<K>().and_then(|c| c.uid_at(&key));
        let deletion = api
            .delete(name, params)
            .await?
            .either(Deletion::Object, |status| Deletion::Gone(Box::new(status)));
        let answer = match &deletion {
            Deletion::Object(obj) => Answer::Version(version_of(obj)),
            Deletion::Gone(status) => {
                let answered = status.details.as_ref().map(|d| d.uid.clone());
                let precondition = params.preconditions.as_ref().and_then(|p| p.uid.clone());
                let uid = answered
                    .filter(|uid| !uid.is_empty())
                    .or(precondition)
                    .or(cached);
                Answer::Gone { key, uid }
            }
        };
        self.record(&api, name, answer).await?;
        Ok(deletion)
    }

    /// Records the answer to a patch, or turns its error into the client's (an apply's 409
    /// Conflict into [`ClientError::ApplyConflict`]).
    async fn patched<K: ClientObject, P: Serialize>(
        &self,
        api: &Api<K>,
        name: &str,
        patch: &Patch<P>,
        answer: Result<K, kube::Error>,
    ) -> Result<K, ClientError> {
        let patched = match answer {
            Ok(patched) => patched,
            Err(e) if matches!(patch, Patch::Apply(_)) => return Err(ClientError::of_apply(e)),
            Err(e) => return Err(e.into()),
        };
        self.record(api, name, Answer::Version(version_of(&patched)))
            .await?;
        Ok(patched)
    }

    /// Records what a write of `name` (made through `api`) answered, for the running
    /// reconcile's key to wait for: counted, and nothing more, outside a reconcile or for a
    /// type without an informer.
    async fn record<K: ClientObject>(
        &self,
        api: &Api<K>,
        name: &str,
        answer: Answer,
    ) -> Result<(), ClientError> {
        self.counters.writes.fetch_add(1, Ordering::Relaxed);
        let Some(cache) = self.cache::<K>() else {
            // Nothing of this client reads the type back.
            return Ok(());
        };
        if !written::in_reconcile() {
            self.counters.unattributed.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(
                kind = %kind::<K>(),
                name,
                "a write outside a reconcile's task: no reconcile waits for it"
            );
            return Ok(());
        }
        let cache: Arc<dyn WrittenCache> = cache;
        let version = match answer {
            Answer::Version(Some(version)) => version,
            Answer::Gone {
                key,
                uid: Some(uid),
            } => {
                written::record(|w| w.gone(cache, key, uid));
                return Ok(());
            }
            Answer::Version(None) | Answer::Gone { uid: None, .. } => {
                self.counters.versions_asked.fetch_add(1, Ordering::Relaxed);
                collection_version(api, name).await?
            }
        };
        written::record(|w| w.version(cache, version));
        Ok(())
    }
}

/// The collection's resource version now, from a list of at most one object: a consistent
/// read, so at or past any write the server has answered.
async fn collection_version<K: ClientObject>(
    api: &Api<K>,
    name: &str,
) -> Result<String, ClientError> {
    let error = |source| ClientError::NoResourceVersion {
        kind: kind::<K>(),
        name: name.to_owned(),
        source,
    };
    let list = api
        .list(&ListParams::default().limit(1))
        .await
        .map_err(|e| error(Some(e)))?;
    tracing::debug!(
        kind = %kind::<K>(),
        name,
        version = list.metadata.resource_version.as_deref(),
        "a write's answer had nothing to wait for: waiting for the collection's version instead"
    );
    list.metadata
        .resource_version
        .filter(|v| !v.is_empty())
        .ok_or_else(|| error(None))
}

/// The parameters of a server-side apply.
fn apply_params(field_manager: &str, force: bool) -> PatchParams {
    let params = PatchParams::apply(field_manager);
    if force { params.force() } else { params }
}
