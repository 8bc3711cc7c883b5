//! The public handle: [`ApiServer`] starts and stops the listener, and reads and writes objects
//! from Rust without HTTP; [`Error`] is what its methods fail with.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use k8s_openapi::{ListableResource, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::deletion::DeleteOptions;
use crate::fault_control::Faults;
use crate::objects::Target;
use crate::patch::Patch;
use crate::resource::{ResourceInfo, Scope};
use crate::router::router;
use crate::state::{RecordedRequest, Shared};
use crate::status::StatusError;
use crate::storage::StoredObject;

/// Errors of the Rust handle.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The server refused the operation; the status is what an HTTP client would get.
    #[error(transparent)]
    Status(#[from] StatusError),
    /// The resource type was never registered.
    #[error("resource {0} is not registered")]
    NotRegistered(String),
    /// An object did not convert to or from JSON.
    #[error("object (de)serialisation failed: {0}")]
    Json(#[from] serde_json::Error),
    /// Binding the listening socket failed.
    #[error("could not bind the API server: {0}")]
    Bind(#[from] std::io::Error),
}

/// A running Kubernetes-compatible API server on a loopback port.
///
/// Cheap to share by reference; [`ApiServer::shutdown`] stops it (dropping it stops it too).
pub struct ApiServer {
    shared: Arc<Shared>,
    addr: SocketAddr,
    listener: tokio::sync::Mutex<Listener>,
}

/// The accept loop currently serving, and how to stop it.
struct Listener {
    stop: CancellationToken,
    task: Option<JoinHandle<()>>,
}

fn spawn_listener(shared: &Arc<Shared>, listener: tokio::net::TcpListener) -> Listener {
    let app = router(shared);
    let stop = shared.shutdown.child_token();
    let stopped = stop.clone();
    let task = tokio::spawn(async move {
        let serve = axum::serve(listener, app)
            .with_graceful_shutdown(async move { stopped.cancelled().await });
        if let Err(err) = serve.await {
            tracing::warn!(%err, "API server stopped with an error");
        }
    });
    Listener {
        stop,
        task: Some(task),
    }
}

impl Listener {
    async fn stop(&mut self) {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            // Connections still open after a grace period are cut.
            if tokio::time::timeout(Duration::from_secs(5), task)
                .await
                .is_err()
            {
                tracing::warn!("API server did not stop within 5 s");
            }
        }
    }
}

impl std::fmt::Debug for ApiServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiServer")
            .field("addr", &self.addr)
            .field("resource_version", &self.resource_version())
            .finish_non_exhaustive()
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.shared.shutdown.cancel();
    }
}

/// The resource type `K` as registered: its index, or an error.
fn typed_target<K: Resource>(shared: &Shared) -> Result<usize, Error> {
    shared
        .storage
        .read()
        .lookup(K::GROUP, K::VERSION, K::URL_PATH_SEGMENT)
        .ok_or_else(|| Error::NotRegistered(format!("{}/{}", K::API_VERSION, K::URL_PATH_SEGMENT)))
}

impl ApiServer {
    /// Binds the configured address and starts serving.
    pub async fn start(config: Config) -> Result<ApiServer, Error> {
        let listener = tokio::net::TcpListener::bind((config.bind, config.port)).await?;
        let addr = listener.local_addr()?;
        let shared = Shared::new(config);
        crate::garbage::start(&shared);
        let listener = spawn_listener(&shared, listener);
        Ok(ApiServer {
            shared,
            addr,
            listener: tokio::sync::Mutex::new(listener),
        })
    }

    /// The base URL, e.g. `http://127.0.0.1:41234`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A kubeconfig (YAML) pointing at this server, for kubectl and kube-client.
    pub fn kubeconfig(&self) -> String {
        crate::kubeconfig::render(&self.url(), None)
    }

    /// A kubeconfig (YAML) pointing at this server whose user sends `token` as its bearer
    /// token: the identity [`Faults::isolate`] addresses (kube-client sends a bearer token over
    /// plain HTTP as well).
    pub fn kubeconfig_with_token(&self, token: &str) -> String {
        crate::kubeconfig::render(&self.url(), Some(token))
    }

    /// Registers a k8s-openapi resource type (idempotent).
    pub fn register<K>(&self) -> &Self
    where
        K: Resource + ListableResource,
        K::Scope: Scope,
    {
        self.register_info(ResourceInfo::of::<K>())
    }

    /// Registers a resource described by hand, e.g. a custom resource (idempotent).
    pub fn register_info(&self, info: ResourceInfo) -> &Self {
        self.shared.storage.write().register(info);
        self
    }

    /// Stops serving a resource while running, as deleting its CRD does: every object of it is
    /// deleted (one `DELETED` event each, as the CRD's cleanup finalizer deletes them), then
    /// its open watches end cleanly (no `ERROR` event: kube-apiserver stops the resource's
    /// watch cache, which closes its watchers), and every later request for it, discovery
    /// included, is `404 NotFound` "the server could not find the requested resource".
    /// [`register_info`](Self::register_info) serves it again, empty. Returns how many
    /// objects were deleted; [`Error::NotRegistered`] if it is not served.
    pub fn unregister(&self, info: &ResourceInfo) -> Result<usize, Error> {
        let r = self.index(info)?;
        Ok(self.shared.unregister(r))
    }

    /// The head revision: the resourceVersion of the latest change.
    pub fn resource_version(&self) -> u64 {
        self.shared.storage.read().head
    }

    /// The oldest revision still served (lists at and watches from older ones get 410).
    pub fn history_floor(&self) -> u64 {
        self.shared.storage.read().floor
    }

    /// How many changes the history holds now.
    pub fn history_len(&self) -> usize {
        self.shared.storage.read().history_len()
    }

    /// How many watch streams are open right now.
    pub fn open_watches(&self) -> usize {
        self.shared.open_watches.load(Ordering::SeqCst)
    }

    /// How many requests of hung clients ([`Isolation::Hang`](crate::Isolation::Hang)) are
    /// held right now, waiting for their client to be healed.
    pub fn held_requests(&self) -> usize {
        self.shared.held_requests.load(Ordering::SeqCst)
    }

    /// Starts (or stops) recording every resource request (discovery excluded): method, path
    /// and query string, as they arrived, before any fault applies. Off by default, so a
    /// long-running server keeps no such log.
    pub fn record_requests(&self, on: bool) -> &Self {
        self.shared.recording.store(on, Ordering::SeqCst);
        self
    }

    /// The resource requests recorded so far, oldest first.
    pub fn recorded_requests(&self) -> Vec<RecordedRequest> {
        self.shared.recorded.lock().clone()
    }

    /// Forgets the recorded requests.
    pub fn clear_recorded_requests(&self) {
        self.shared.recorded.lock().clear();
    }

    /// The fault controls.
    pub fn faults(&self) -> Faults {
        Faults {
            shared: self.shared.clone(),
        }
    }

    /// Stops serving: open watches end cleanly, then the listener closes.
    pub async fn shutdown(self) {
        self.shared.shutdown.cancel();
        self.listener.lock().await.stop().await;
    }

    /// A process restart: every watch is aborted, the port refuses connections for
    /// `down_for`, then the server listens again on the same address with its history lost
    /// (objects and the revision counter survive, as they live in etcd). Combine with
    /// [`Faults::set_unavailable`] for the "storage is (re)initializing" phase that follows a
    /// real restart.
    pub async fn restart_process(&self, down_for: Duration) -> Result<(), Error> {
        let mut listener = self.listener.lock().await;
        self.faults().restart();
        listener.stop().await;
        tokio::time::sleep(down_for).await;
        let socket = tokio::net::TcpListener::bind(self.addr).await?;
        *listener = spawn_listener(&self.shared, socket);
        Ok(())
    }

    fn index(&self, info: &ResourceInfo) -> Result<usize, Error> {
        self.shared
            .storage
            .read()
            .lookup(&info.group, &info.version, &info.plural)
            .ok_or_else(|| Error::NotRegistered(info.group_resource()))
    }

    fn typed<K: DeserializeOwned + Resource>(&self, object: &StoredObject) -> Result<K, Error> {
        let mut value = object.value.clone();
        if let Some(obj) = value.as_object_mut() {
            obj.insert("kind".into(), K::KIND.into());
            obj.insert("apiVersion".into(), K::API_VERSION.into());
        }
        Ok(serde_json::from_value(value)?)
    }

    fn with_type(&self, r: usize, object: &StoredObject) -> Value {
        let storage = self.shared.storage.read();
        let info = &storage.resource(r).info;
        let mut value = object.value.clone();
        if let Some(obj) = value.as_object_mut() {
            obj.insert("kind".into(), info.kind.clone().into());
            obj.insert("apiVersion".into(), info.api_version().into());
        }
        value
    }

    /// Creates an object (namespace from the object, `default` if unset). Returns it as stored.
    pub fn create<K>(&self, object: &K) -> Result<K, Error>
    where
        K: Resource + Serialize + DeserializeOwned,
    {
        let r = typed_target::<K>(&self.shared)?;
        let value = serde_json::to_value(object)?;
        let stored = self.shared.create(
            Target {
                resource: r,
                namespace: None,
            },
            value,
        )?;
        self.typed(&stored)
    }

    /// Replaces an object, as an HTTP `PUT` does. A `metadata.resourceVersion` on it is a
    /// precondition (409 Conflict when stale); without one (or at `"0"`) the update is
    /// unconditional, except for types whose registry refuses that (leases and custom
    /// resources: 422 Invalid). A `metadata.uid` on it is a precondition too (409 when it is
    /// not the stored object's). A missing object is 404, except for types that allow create
    /// on update (leases), where it is created.
    pub fn update<K>(&self, object: &K) -> Result<K, Error>
    where
        K: Resource + Serialize + DeserializeOwned,
    {
        let r = typed_target::<K>(&self.shared)?;
        let value = serde_json::to_value(object)?;
        let namespace = value
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let name = value
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let replaced = self.shared.update(
            Target {
                resource: r,
                namespace: namespace.as_deref(),
            },
            &name,
            value,
        )?;
        self.typed(&replaced.object)
    }

    /// Applies a JSON merge patch to an object.
    pub fn patch<K>(&self, namespace: Option<&str>, name: &str, patch: &Value) -> Result<K, Error>
    where
        K: Resource + DeserializeOwned,
    {
        let r = typed_target::<K>(&self.shared)?;
        let stored = self.shared.patch(
            Target {
                resource: r,
                namespace,
            },
            name,
            &Patch::Merge(patch.clone()),
        )?;
        self.typed(&stored)
    }

    /// Removes an object at once, as deleting its key in etcd would: one `DELETED` event, no
    /// graceful deletion, finalizers ignored. Returns its last state (stamped with the
    /// delete's revision). [`ApiServer::delete_with_grace`] is what an HTTP `DELETE` does.
    pub fn delete<K>(&self, namespace: Option<&str>, name: &str) -> Result<K, Error>
    where
        K: Resource + DeserializeOwned,
    {
        let r = typed_target::<K>(&self.shared)?;
        let deleted = self.shared.delete(
            Target {
                resource: r,
                namespace,
            },
            name,
            &DeleteOptions {
                immediate: true,
                ..DeleteOptions::default()
            },
        )?;
        self.typed(deleted.object())
    }

    /// Deletes an object as an HTTP `DELETE` with `gracePeriodSeconds` does (`None`: the
    /// object's default, for a pod its `terminationGracePeriodSeconds`). A pod never scheduled
    /// to a node is marked (`MODIFIED`) then removed (`DELETED`); one on a node stays, marked
    /// with `deletionTimestamp`, until the period ends on the server's clock (tokio time) or
    /// [`ApiServer::finish_deletion`] ends it; an object with finalizers stays marked until
    /// an update removes the last one. Returns the marked object, or the last state of a
    /// removed one.
    pub fn delete_with_grace<K>(
        &self,
        namespace: Option<&str>,
        name: &str,
        grace_period_seconds: Option<i64>,
    ) -> Result<K, Error>
    where
        K: Resource + DeserializeOwned,
    {
        let r = typed_target::<K>(&self.shared)?;
        let deleted = self.shared.delete(
            Target {
                resource: r,
                namespace,
            },
            name,
            &DeleteOptions {
                grace_period_seconds,
                ..DeleteOptions::default()
            },
        )?;
        self.typed(deleted.object())
    }

    /// Ends the grace period of an object being deleted now, as the kubelet does once a pod's
    /// containers have stopped (a delete with `gracePeriodSeconds=0`): watchers see
    /// `MODIFIED` (grace period 0) then `DELETED`, or only the `MODIFIED` while finalizers
    /// remain. Returns the object's last state. `400` if it is not being deleted.
    pub fn finish_deletion<K>(&self, namespace: Option<&str>, name: &str) -> Result<K, Error>
    where
        K: Resource + DeserializeOwned,
    {
        let r = typed_target::<K>(&self.shared)?;
        let deleted = self.shared.finish_deletion(
            Target {
                resource: r,
                namespace,
            },
            name,
        )?;
        self.typed(deleted.object())
    }

    /// Reads one object.
    pub fn get<K>(&self, namespace: Option<&str>, name: &str) -> Result<K, Error>
    where
        K: Resource + DeserializeOwned,
    {
        let r = typed_target::<K>(&self.shared)?;
        let stored = self.shared.get(
            Target {
                resource: r,
                namespace,
            },
            name,
        )?;
        self.typed(&stored)
    }

    /// Lists the current objects of a type (in one namespace, or all), with the list's
    /// resource version.
    pub fn list<K>(&self, namespace: Option<&str>) -> Result<(Vec<K>, u64), Error>
    where
        K: Resource + DeserializeOwned,
    {
        let r = typed_target::<K>(&self.shared)?;
        let storage = self.shared.storage.read();
        let head = storage.head;
        let mut out = Vec::new();
        let mut failed = None;
        storage.visit_at(
            r,
            head,
            namespace,
            None,
            &mut |_, obj| match self.typed(obj) {
                Ok(k) => {
                    out.push(k);
                    true
                }
                Err(e) => {
                    failed = Some(e);
                    false
                }
            },
        );
        match failed {
            Some(e) => Err(e),
            None => Ok((out, head)),
        }
    }

    /// Creates an object of any registered resource from JSON.
    pub fn create_value(&self, resource: &ResourceInfo, object: Value) -> Result<Value, Error> {
        let r = self.index(resource)?;
        let stored = self.shared.create(
            Target {
                resource: r,
                namespace: None,
            },
            object,
        )?;
        Ok(self.with_type(r, &stored))
    }

    /// Replaces an object of any registered resource from JSON, as [`ApiServer::update`] does.
    pub fn update_value(&self, resource: &ResourceInfo, object: Value) -> Result<Value, Error> {
        let r = self.index(resource)?;
        let namespace = object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let name = object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let replaced = self.shared.update(
            Target {
                resource: r,
                namespace: namespace.as_deref(),
            },
            &name,
            object,
        )?;
        Ok(self.with_type(r, &replaced.object))
    }

    /// Merge-patches an object of any registered resource.
    pub fn patch_value(
        &self,
        resource: &ResourceInfo,
        namespace: Option<&str>,
        name: &str,
        patch: &Value,
    ) -> Result<Value, Error> {
        let r = self.index(resource)?;
        let stored = self.shared.patch(
            Target {
                resource: r,
                namespace,
            },
            name,
            &Patch::Merge(patch.clone()),
        )?;
        Ok(self.with_type(r, &stored))
    }

    /// Removes an object of any registered resource at once, as [`ApiServer::delete`] does
    /// (finalizers ignored); an HTTP `DELETE` is what honours them.
    pub fn delete_value(
        &self,
        resource: &ResourceInfo,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value, Error> {
        let r = self.index(resource)?;
        let deleted = self.shared.delete(
            Target {
                resource: r,
                namespace,
            },
            name,
            &DeleteOptions {
                immediate: true,
                ..DeleteOptions::default()
            },
        )?;
        Ok(self.with_type(r, deleted.object()))
    }

    /// Reads an object of any registered resource.
    pub fn get_value(
        &self,
        resource: &ResourceInfo,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value, Error> {
        let r = self.index(resource)?;
        let stored = self.shared.get(
            Target {
                resource: r,
                namespace,
            },
            name,
        )?;
        Ok(self.with_type(r, &stored))
    }
}

#[cfg(test)]
mod error_tests {
    use std::error::Error as _;

    use super::Error;

    #[test]
    fn every_wrapping_variant_displays_its_cause() {
        let json = serde_json::from_str::<serde_json::Value>("[").unwrap_err();
        let json_text = json.to_string();
        let err = Error::from(json);
        assert!(err.to_string().contains(&json_text), "{err}");
        assert!(err.source().is_some());

        let io = std::io::Error::new(std::io::ErrorKind::AddrInUse, "address in use");
        let err = Error::from(io);
        assert!(err.to_string().contains("address in use"), "{err}");
        assert!(err.source().is_some());

        let status = crate::status::StatusError::bad_request("no such field");
        let err = Error::from(status);
        assert!(err.to_string().contains("no such field"), "{err}");
    }
}
