//! The server: shared state, the Rust handle, and HTTP routing.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use k8s_openapi::{ListableResource, Resource};
use parking_lot::{Mutex, RwLock};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::codec;
use crate::config::Config;
use crate::faults::{Control, Failure, FaultState, Faults, Verb};
use crate::objects::{DeleteOptions, Deleted, Target};
use crate::patch::Patch;
use crate::query::ListOptions;
use crate::resource::{ResourceInfo, Scope};
use crate::status::StatusError;
use crate::storage::{CacheDelay, Storage, StoredObject};

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

pub(crate) struct Shared {
    pub(crate) config: Config,
    pub(crate) storage: RwLock<Storage>,
    /// The head revision, for waiters (`resourceVersion` ahead of the server).
    pub(crate) head: watch::Sender<u64>,
    pub(crate) control: broadcast::Sender<Control>,
    pub(crate) faults: Mutex<FaultState>,
    pub(crate) open_watches: AtomicUsize,
    /// Bumped on every change of the isolated clients (and on restarts), for what waits on
    /// an isolation: held requests and the watches of isolated clients.
    pub(crate) isolation: watch::Sender<u64>,
    /// How long after its commit the watch cache receives a change (see
    /// [`Faults::set_cache_delay`](crate::Faults::set_cache_delay)); watches follow changes.
    pub(crate) cache_delay: watch::Sender<CacheDelay>,
    /// Requests of hung clients held right now.
    pub(crate) held_requests: AtomicUsize,
    pub(crate) shutdown: CancellationToken,
    /// Whether resource requests are recorded, and the record.
    pub(crate) recording: AtomicBool,
    pub(crate) recorded: Mutex<Vec<RecordedRequest>>,
}

/// One resource request as it arrived (see [`ApiServer::record_requests`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordedRequest {
    /// The HTTP method, e.g. `GET`.
    pub method: String,
    /// The path, e.g. `/api/v1/pods`.
    pub path: String,
    /// The raw query string (without the `?`), as sent.
    pub query: String,
}

impl RecordedRequest {
    /// The decoded value of query parameter `name`, if present (the first one).
    pub fn param(&self, name: &str) -> Option<String> {
        form_urlencoded::parse(self.query.as_bytes())
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.into_owned())
    }

    /// Whether this is a watch (`watch=true`/`watch=1`).
    pub fn is_watch(&self) -> bool {
        self.param("watch").is_some_and(|v| v == "true" || v == "1")
    }
}

impl Shared {
    /// The state of a server with `config`: its registered resources, empty.
    pub(crate) fn new(config: Config) -> Arc<Self> {
        let mut storage = Storage::new(
            config.initial_resource_version.max(1),
            config.history_size,
            config.watch_buffer,
        );
        storage.set_rv_step(config.resource_version_step);
        storage.codec = config.codec();
        for info in &config.resources {
            storage.register(info.clone());
        }
        let (head, _) = watch::channel(storage.head);
        let (control, _) = broadcast::channel(64);
        let (isolation, _) = watch::channel(0);
        let (cache_delay, _) = watch::channel(CacheDelay::default());
        Arc::new(Shared {
            config,
            storage: RwLock::new(storage),
            head,
            control,
            faults: Mutex::new(FaultState::default()),
            open_watches: AtomicUsize::new(0),
            isolation,
            cache_delay,
            held_requests: AtomicUsize::new(0),
            shutdown: CancellationToken::new(),
            recording: AtomicBool::new(false),
            recorded: Mutex::new(Vec::new()),
        })
    }
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

/// The HTTP application: every request goes to [`handle`].
pub(crate) fn router(shared: &Arc<Shared>) -> axum::Router {
    axum::Router::new()
        .fallback(handle)
        .with_state(shared.clone())
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

// ---------------------------------------------------------------------------------------------
// HTTP

pub(crate) fn json_response(code: StatusCode, body: impl Into<Body>) -> Response {
    let mut response = Response::new(body.into());
    *response.status_mut() = code;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

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

/// A resource request, once the path is understood.
struct ResourceRoute {
    resource: usize,
    namespace: Option<String>,
    name: Option<String>,
    watch_path: bool,
}

enum Route {
    Resource(ResourceRoute),
    Discovery(Response),
    NotFound,
}

fn route(shared: &Shared, path: &str) -> Route {
    let segments: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let storage = shared.storage.read();
    let (group, version, rest): (&str, &str, &[&str]) = match segments.as_slice() {
        ["version"] => return Route::Discovery(crate::discovery::version(&shared.config)),
        ["healthz" | "livez" | "readyz"] => {
            return Route::Discovery(
                Response::builder()
                    .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
                    .body(Body::from("ok"))
                    .unwrap_or_default(),
            );
        }
        ["api"] => return Route::Discovery(crate::discovery::core_versions(&storage)),
        ["apis"] => return Route::Discovery(crate::discovery::group_list(&storage)),
        ["apis", group] => {
            return crate::discovery::group(&storage, group)
                .map_or(Route::NotFound, Route::Discovery);
        }
        ["api", version] => {
            return crate::discovery::resource_list(&storage, "", version)
                .map_or(Route::NotFound, Route::Discovery);
        }
        ["apis", group, version] => {
            return crate::discovery::resource_list(&storage, group, version)
                .map_or(Route::NotFound, Route::Discovery);
        }
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return Route::NotFound,
    };
    let (watch_path, rest) = match rest {
        ["watch", rest @ ..] => (true, rest),
        _ => (false, rest),
    };
    let lookup = |plural: &str| storage.lookup(group, version, plural);
    let (resource, namespace, name) = match rest {
        ["namespaces", ns, plural] => match lookup(plural) {
            Some(r) if storage.resource(r).info.namespaced => (r, Some(*ns), None),
            _ => return Route::NotFound,
        },
        ["namespaces", ns, plural, name] => match lookup(plural) {
            Some(r) if storage.resource(r).info.namespaced => (r, Some(*ns), Some(*name)),
            _ => return Route::NotFound,
        },
        [plural] => match lookup(plural) {
            Some(r) => (r, None, None),
            None => return Route::NotFound,
        },
        [plural, name] => match lookup(plural) {
            Some(r) if !storage.resource(r).info.namespaced => (r, None, Some(*name)),
            _ => return Route::NotFound,
        },
        _ => return Route::NotFound,
    };
    Route::Resource(ResourceRoute {
        resource,
        namespace: namespace.map(str::to_owned),
        name: name.map(str::to_owned),
        watch_path,
    })
}

async fn handle(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let path = parts.uri.path().to_owned();
    let query = parts.uri.query().unwrap_or("").to_owned();
    let route = route(&shared, &path);
    if let Route::Resource(_) = route
        && shared.recording.load(Ordering::SeqCst)
    {
        shared.recorded.lock().push(RecordedRequest {
            method: parts.method.as_str().to_owned(),
            path: path.clone(),
            query: query.clone(),
        });
    }
    // An isolated client is stopped before anything else, discovery included.
    let client = crate::isolation::client_of(&parts.headers);
    if let Some(client) = client.as_deref()
        && let Some(response) = shared.isolation_gate(client).await
    {
        return response;
    }
    let route = match route {
        Route::Discovery(response) => return response,
        Route::NotFound => return StatusError::unknown_path().into_response(),
        Route::Resource(route) => route,
    };
    let mut opts = match ListOptions::parse(&query) {
        Ok(opts) => opts,
        Err(status) => return status.into_response(),
    };
    opts.watch |= route.watch_path;
    let verb = match (&parts.method, route.name.is_some(), opts.watch) {
        (&Method::GET, false, true) | (&Method::GET, true, true) => Verb::Watch,
        (&Method::GET, false, false) => Verb::List,
        (&Method::GET, true, false) => Verb::Get,
        (&Method::POST, false, _) => Verb::Create,
        (&Method::PUT, true, _) => Verb::Update,
        (&Method::PATCH, true, _) => Verb::Patch,
        (&Method::DELETE, true, _) => Verb::Delete,
        // `deletecollection`: served on namespaced collections in a namespace, and on
        // cluster-scoped ones.
        (&Method::DELETE, false, _)
            if route.namespace.is_some()
                || !shared
                    .storage
                    .read()
                    .resource(route.resource)
                    .info
                    .namespaced =>
        {
            Verb::Delete
        }
        (method, _, _) => {
            let storage = shared.storage.read();
            let info = storage.resource(route.resource).info.clone();
            return StatusError::method_not_allowed(&info, method.as_str()).into_response();
        }
    };
    // `WithRequestDeadline`: `?timeout=` bounds every request but watches.
    let deadline = if verb == Verb::Watch {
        None
    } else {
        match request_timeout(&query) {
            Ok(deadline) => deadline,
            Err(status) => return status.into_response(),
        }
    };
    let work = handle_resource(shared, parts, body, route, verb, opts, query);
    match deadline {
        Some(deadline) => tokio::time::timeout(deadline, work)
            .await
            .unwrap_or_else(|_| StatusError::request_timeout().into_response()),
        None => work.await,
    }
}

/// The longest `?timeout=` honoured: kube-apiserver's `--request-timeout` default.
const REQUEST_TIMEOUT_MAXIMUM: Duration = Duration::from_secs(60);

/// The request deadline `?timeout=` sets: a Go duration; 0 (or more than the maximum) is the
/// maximum; absent is none (the simulator imposes no deadline of its own).
fn request_timeout(query: &str) -> Result<Option<Duration>, StatusError> {
    let Some((_, value)) = form_urlencoded::parse(query.as_bytes()).find(|(k, _)| k == "timeout")
    else {
        return Ok(None);
    };
    if value.is_empty() {
        return Ok(None);
    }
    let timeout = parse_go_duration(&value).map_err(|e| {
        StatusError::bad_request(format!(
            "invalid timeout specified in the request URL - {e}"
        ))
    })?;
    Ok(Some(
        if timeout.is_zero() || timeout > REQUEST_TIMEOUT_MAXIMUM {
            REQUEST_TIMEOUT_MAXIMUM
        } else {
            timeout
        },
    ))
}

/// Go's `time.ParseDuration` for the non-negative durations a timeout takes (`"1.5s"`,
/// `"1m30s"`, `"250ms"`), with its error messages. A negative one is zero.
pub(crate) fn parse_go_duration(text: &str) -> Result<Duration, String> {
    let invalid = || format!("time: invalid duration {text:?}");
    let (negative, mut rest) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(invalid());
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number = &rest[..number_end];
        if number.is_empty() || number == "." {
            return Err(invalid());
        }
        let value: f64 = number.parse().map_err(|_| invalid())?;
        rest = &rest[number_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit = &rest[..unit_end];
        let scale = match unit {
            "" => return Err(format!("time: missing unit in duration {text:?}")),
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            other => return Err(format!("time: unknown unit {other:?} in duration {text:?}")),
        };
        total += value * scale;
        rest = &rest[unit_end..];
    }
    if negative {
        return Ok(Duration::ZERO);
    }
    Duration::try_from_secs_f64(total).map_err(|_| invalid())
}

async fn handle_resource(
    shared: Arc<Shared>,
    parts: axum::http::request::Parts,
    body: Body,
    route: ResourceRoute,
    verb: Verb,
    opts: ListOptions,
    query: String,
) -> Response {
    let (latency, failure, unavailable) = {
        let mut faults = shared.faults.lock();
        (
            faults.latency,
            faults.take_failure(verb),
            faults.unavailable,
        )
    };
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    if let Some(failure) = failure {
        return failure_response(failure);
    }
    if let (Some(retry_after), Verb::List | Verb::Watch) = (unavailable, verb) {
        return failure_response(Failure::too_many_requests(retry_after));
    }
    let body = match axum::body::to_bytes(body, 64 * 1024 * 1024).await {
        Ok(b) => b,
        Err(e) => return StatusError::bad_request(e.to_string()).into_response(),
    };
    let content_type = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let accept = parts
        .headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let builtin = {
        let storage = shared.storage.read();
        let info = &storage.resource(route.resource).info;
        codec::serves(info)
    };
    let output = match codec::negotiate(accept, builtin) {
        Ok(output) => output,
        Err(status) => return status.into_response(),
    };
    let request = ResourceRequest {
        route,
        verb,
        opts,
        query: &query,
        content_type: &content_type,
        body,
        client: crate::isolation::client_of(&parts.headers),
        output,
    };
    match serve(&shared, request).await {
        Ok(response) => response,
        Err(status) => codec::status_response(status, output),
    }
}

pub(crate) fn parse_body(body: &[u8]) -> Result<Value, StatusError> {
    serde_json::from_slice(body).map_err(|e| {
        StatusError::bad_request(format!(
            "the object provided is unrecognized: couldn't get version/kind; json parse error: {e}"
        ))
    })
}

/// A resource request, read and routed, ready to be served.
struct ResourceRequest<'a> {
    route: ResourceRoute,
    verb: Verb,
    opts: ListOptions,
    query: &'a str,
    content_type: &'a str,
    body: Bytes,
    /// Who sent it (see [`crate::isolation::client_of`]).
    client: Option<String>,
    /// The negotiated response encoding.
    output: codec::Output,
}

async fn serve(
    shared: &Arc<Shared>,
    request: ResourceRequest<'_>,
) -> Result<Response, StatusError> {
    let ResourceRequest {
        route,
        verb,
        mut opts,
        query,
        content_type,
        body,
        client,
        output,
    } = request;
    let media = content_type.split(';').next().unwrap_or("").trim();
    let read_body = |body: &[u8]| -> Result<Value, StatusError> {
        let info = shared.storage.read().resource(route.resource).info.clone();
        let mut value = codec::read_body(&info, media, body)?;
        crate::strategy::prepare_secret(&info, &mut value)?;
        Ok(value)
    };
    let target = Target {
        resource: route.resource,
        namespace: route.namespace.as_deref(),
    };
    let name = route.name.as_deref().unwrap_or_default();
    let object = |stored: &StoredObject, code: StatusCode| -> Response {
        let storage = shared.storage.read();
        let mut out = Vec::with_capacity(stored.body.len() + 64);
        storage
            .resource(route.resource)
            .write_typed(&mut out, stored);
        codec::body_response(code, out, output)
    };
    match verb {
        Verb::List => {
            opts.validate()?;
            let body = shared
                .list(route.resource, route.namespace.as_deref(), &opts)
                .await?;
            Ok(codec::body_response(StatusCode::OK, body, output))
        }
        Verb::Watch => {
            if let Some(name) = route.name.as_deref() {
                // A named watch is a watch of the collection restricted to that name.
                let selector = format!("metadata.name={name}");
                match FieldName::of(&opts.field_selector) {
                    Some(other) if other != name => {
                        return Err(StatusError::bad_request(format!(
                            "fieldSelector metadata.name={other} conflicts with the name in the path ({name})"
                        )));
                    }
                    _ => {}
                }
                opts.field_selector = if opts.field_selector.is_empty() {
                    selector
                } else {
                    format!("{},{selector}", opts.field_selector)
                };
            }
            opts.validate()?;
            let response =
                shared.watch(route.resource, route.namespace.as_deref(), &opts, client)?;
            Ok(codec::watch_response(response, output))
        }
        Verb::Get => Ok(object(&*shared.get(target, name)?, StatusCode::OK)),
        Verb::Create => {
            if route.namespace.is_none()
                && shared
                    .storage
                    .read()
                    .resource(route.resource)
                    .info
                    .namespaced
            {
                return Err(StatusError::unknown_path());
            }
            let stored = shared.create(target, read_body(&body)?)?;
            Ok(object(&stored, StatusCode::CREATED))
        }
        Verb::Update => {
            let replaced = shared.update(target, name, read_body(&body)?)?;
            let code = if replaced.created {
                StatusCode::CREATED
            } else {
                StatusCode::OK
            };
            Ok(object(&replaced.object, code))
        }
        Verb::Patch => {
            let info = shared.storage.read().resource(route.resource).info.clone();
            let patch = Patch::decode(&info, media, &body)?;
            let stored = shared.patch(target, name, &patch)?;
            Ok(object(&stored, StatusCode::OK))
        }
        Verb::Delete if route.name.is_none() => {
            opts.validate()?;
            let options = delete_options(query, &body)?;
            delete_collection(
                shared,
                route.resource,
                route.namespace.as_deref(),
                &opts,
                &options,
            )
            .await
        }
        Verb::Delete => {
            let options = delete_options(query, &body)?;
            match shared.delete(target, name, &options)? {
                // Still stored (graceful deletion, finalizers): the marked object.
                Deleted::Terminating(stored) => Ok(object(&stored, StatusCode::OK)),
                Deleted::Removed(stored) => {
                    let storage = shared.storage.read();
                    let info = &storage.resource(route.resource).info;
                    if returns_deleted_object(info) {
                        drop(storage);
                        Ok(object(&stored, StatusCode::OK))
                    } else {
                        Ok(codec::body_response(
                            StatusCode::OK,
                            delete_success(info, &stored).to_string().into_bytes(),
                            output,
                        ))
                    }
                }
            }
        }
        Verb::Any => Err(StatusError::unknown_path()),
    }
}

/// The `DeleteOptions` of a request: the body (JSON, may be empty) and the
/// `gracePeriodSeconds` query parameter (which wins, as the handler decodes the query last).
fn delete_options(query: &str, body: &[u8]) -> Result<DeleteOptions, StatusError> {
    let options: Value = if body.is_empty() {
        json!({})
    } else {
        parse_body(body)?
    };
    let text = |pointer: &str| {
        options
            .pointer(pointer)
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let mut grace_period_seconds = options.get("gracePeriodSeconds").and_then(Value::as_i64);
    for (k, v) in form_urlencoded::parse(query.as_bytes()) {
        if k == "gracePeriodSeconds" {
            grace_period_seconds = Some(v.trim().parse::<i64>().map_err(|_| {
                StatusError::bad_request(format!(
                    "invalid value {v:?} for query parameter gracePeriodSeconds: strconv.ParseInt: parsing {v:?}: invalid syntax"
                ))
            })?);
        }
    }
    Ok(DeleteOptions {
        resource_version: text("/preconditions/resourceVersion"),
        uid: text("/preconditions/uid"),
        grace_period_seconds,
        immediate: false,
    })
}

/// `DELETE` on a collection (`Store.DeleteCollection`): lists what the selectors (and
/// `limit`) select, deletes each (with the request's `DeleteOptions`: pods gracefully,
/// finalizers respected; one already gone is skipped), and answers with that list.
async fn delete_collection(
    shared: &Arc<Shared>,
    resource: usize,
    namespace: Option<&str>,
    opts: &ListOptions,
    options: &DeleteOptions,
) -> Result<Response, StatusError> {
    let listed = shared.list(resource, namespace, opts).await?;
    let list: Value =
        serde_json::from_slice(&listed).map_err(|e| StatusError::internal(&e.to_string()))?;
    for item in list["items"].as_array().into_iter().flatten() {
        let name = item
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        let ns = item.pointer("/metadata/namespace").and_then(Value::as_str);
        let target = Target {
            resource,
            namespace: ns.or(namespace),
        };
        match shared.delete(target, name, options) {
            Ok(_) => {}
            Err(e) if e.code() == 404 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(json_response(StatusCode::OK, listed))
}

/// Registries with `ReturnDeletedObject: true` answer a delete with the object; the others
/// with a `Status`.
fn returns_deleted_object(info: &ResourceInfo) -> bool {
    match info.group.as_str() {
        "" => matches!(info.plural.as_str(), "pods" | "serviceaccounts"),
        "storage.k8s.io" => info.plural == "storageclasses",
        _ => false,
    }
}

/// `Store.finalizeDelete`'s answer: `status: Success`, no `code`, and `details.kind` set to
/// the resource (not the kind).
fn delete_success(info: &ResourceInfo, stored: &StoredObject) -> Value {
    let mut details = serde_json::Map::new();
    if let Some(name) = stored.value.pointer("/metadata/name") {
        details.insert("name".into(), name.clone());
    }
    if !info.group.is_empty() {
        details.insert("group".into(), Value::String(info.group.clone()));
    }
    details.insert("kind".into(), Value::String(info.plural.clone()));
    if let Some(uid) = stored.value.pointer("/metadata/uid") {
        details.insert("uid".into(), uid.clone());
    }
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": details,
    })
}

/// The `metadata.name` a field selector pins, if any.
struct FieldName;

impl FieldName {
    fn of(selector: &str) -> Option<&str> {
        selector.split(',').find_map(|term| {
            let term = term.trim();
            term.strip_prefix("metadata.name==")
                .or_else(|| term.strip_prefix("metadata.name="))
        })
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
