//! `GET <collection>?watch=1`: newline-delimited JSON events over a chunked response.
//!
//! Each watch runs as one task that writes into a small channel read by the response body.
//! When the client goes away the body is dropped, the channel closes, and the task ends at
//! once (it waits on `closed()`), releasing its subscription: a disconnect costs nothing.

use std::collections::VecDeque;
use std::io;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use rand::Rng;
use serde_json::Value;
use tokio::sync::{broadcast, mpsc, watch};
use tokio::time::Instant;

use crate::config::{BookmarkShape, ExpiredWatch, SlowWatcher};
use crate::faults::{Control, Isolation};
use crate::query::{ListOptions, RequestedRv};
use crate::selector::{FieldSelector, LabelSelector};
use crate::state::Shared;
use crate::status::StatusError;
use crate::storage::{CacheDelay, Change, ChangeType, Storage, StoredObject, write_typed};

/// Bytes gathered before a write is handed to the connection.
const FLUSH_BYTES: usize = 64 * 1024;
/// The annotation that marks the end of a streaming list's initial events.
pub(crate) const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// What the watch task hands to the response body.
enum Chunk {
    Data(Bytes),
    /// Abort the connection once everything before has been flushed.
    Abort,
}

/// The response body: the task's chunks, and an abort that happens only after the bytes before
/// it reached the socket (the body returns `Pending` once, which makes hyper flush, then fails).
struct BodyStream {
    rx: mpsc::Receiver<Chunk>,
    aborting: bool,
}

impl futures::Stream for BodyStream {
    type Item = Result<Bytes, io::Error>;

    fn poll_next(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        use std::task::Poll;
        let this = self.get_mut();
        if this.aborting {
            return Poll::Ready(Some(Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "watch dropped by fault injection",
            ))));
        }
        match this.rx.poll_recv(cx) {
            Poll::Ready(Some(Chunk::Data(bytes))) => Poll::Ready(Some(Ok(bytes))),
            Poll::Ready(Some(Chunk::Abort)) => {
                this.aborting = true;
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// Where the stream starts.
enum Start {
    /// Synthetic ADDED events for the current state, then changes after it.
    Initial { wait_for: Option<u64> },
    /// Changes after the given revision.
    After(u64),
    /// Changes after the current head.
    Now,
}

struct Filter {
    namespace_prefix: Option<String>,
    labels: LabelSelector,
    fields: FieldSelector,
}

impl Filter {
    fn matches(&self, key: &str, object: &StoredObject) -> bool {
        self.namespace_prefix
            .as_deref()
            .is_none_or(|p| key.starts_with(p))
            && self.labels.matches(&object.value)
            && self.fields.matches(&object.value)
    }
}

/// Decrements the open-watch count when the task ends, however it ends.
struct OpenWatch(Arc<Shared>);

impl Drop for OpenWatch {
    fn drop(&mut self) {
        self.0.open_watches.fetch_sub(1, Ordering::SeqCst);
    }
}

struct WatchTask {
    shared: Arc<Shared>,
    resource: usize,
    typed_prefix: Bytes,
    kind: String,
    api_version: String,
    is_pod: bool,
    filter: Filter,
    bookmarks: bool,
    send_end_marker: bool,
    start: Start,
    deadline: Instant,
    out: mpsc::Sender<Chunk>,
    changes: broadcast::Receiver<Arc<Change>>,
    control: broadcast::Receiver<Control>,
    /// Live changes at or below this revision are not sent.
    skip_through: u64,
    /// The revision of the last change processed (sent or filtered out).
    seen_rv: u64,
    buffer: Vec<u8>,
    /// Changes the watch cache has not received yet (see `Faults::set_cache_delay`), oldest
    /// first; as many as were committed within the delay.
    pending: VecDeque<Arc<Change>>,
    delays: watch::Receiver<CacheDelay>,
    last_event: Option<Bytes>,
    /// The client that opened the watch (see [`crate::isolation::client_of`]), and the
    /// isolation changes to follow for it.
    client: Option<(String, watch::Receiver<u64>)>,
    _open: OpenWatch,
}

enum Flow {
    Continue,
    Stop,
}

impl Shared {
    /// Starts a watch, or fails before the `200` (bad selectors, bad resource version, an
    /// expired start in [`ExpiredWatch::Http410`] mode).
    pub(crate) fn watch(
        self: &Arc<Self>,
        r: usize,
        namespace: Option<&str>,
        opts: &ListOptions,
        client: Option<String>,
    ) -> Result<Response, StatusError> {
        let storage = self.storage.read();
        let requested = opts.requested_rv(storage.codec)?;
        let state = storage.resource(r);
        let info = state.info.clone();
        let labels =
            LabelSelector::parse(&opts.label_selector).map_err(StatusError::bad_request)?;
        let fields =
            FieldSelector::parse(&opts.field_selector, &info).map_err(StatusError::bad_request)?;
        let send_initial = sends_initial_events(opts, requested);
        let start = self.watch_start(&storage, send_initial, requested);
        let (tx, rx) = mpsc::channel::<Chunk>(16);
        let early_error = self.expired_start(&storage, &start)?;
        let timeout = self.watch_timeout(opts);
        self.open_watches.fetch_add(1, Ordering::SeqCst);
        let guard = OpenWatch(self.clone());
        let response = stream_response(rx)?;

        if let Some(status) = early_error {
            drop(guard);
            let line = event_line("ERROR", &status.to_json());
            tokio::spawn(async move {
                let _ = tx.send(Chunk::Data(line)).await;
            });
            return Ok(response);
        }

        // Subscribe and take the starting point under the same lock as commits: no change can
        // fall between the snapshot (or history replay) and the live stream.
        let changes = state.tx.subscribe();
        let control = self.control.subscribe();
        let filter = Filter {
            namespace_prefix: namespace
                .filter(|_| info.namespaced)
                .map(|ns| format!("{ns}/")),
            labels,
            fields,
        };
        let (initial, replay, skip_through) =
            self.starting_point(&storage, r, namespace, &start, requested, &filter);
        let task = WatchTask {
            shared: self.clone(),
            resource: r,
            typed_prefix: state.typed_prefix.clone(),
            kind: info.kind.clone(),
            api_version: info.api_version(),
            is_pod: info.group.is_empty() && info.plural == "pods",
            filter,
            bookmarks: opts.allow_watch_bookmarks,
            send_end_marker: send_initial && opts.allow_watch_bookmarks,
            start,
            deadline: Instant::now() + timeout,
            out: tx,
            changes,
            control,
            skip_through,
            // A watch from ahead of the head has seen nothing yet: no bookmark until the head
            // reaches its revision (the cache watcher sends only events newer than it, or a
            // bookmark at exactly it).
            seen_rv: skip_through.min(storage.head),
            buffer: Vec::with_capacity(FLUSH_BYTES),
            pending: VecDeque::new(),
            delays: self.cache_delay.subscribe(),
            last_event: None,
            client: client.map(|c| (c, self.isolation.subscribe())),
            _open: guard,
        };
        drop(storage);
        tokio::spawn(task.run(initial, replay));
        Ok(response)
    }

    /// Where a watch starts, given whether it is a streaming list and the revision it asks
    /// for.
    fn watch_start(&self, storage: &Storage, send_initial: bool, requested: RequestedRv) -> Start {
        let cached = self.cache_revision(storage);
        match (send_initial, requested) {
            (true, RequestedRv::At(n)) if n > cached => Start::Initial { wait_for: Some(n) },
            // A consistent streaming list is served from the cache once it has the head.
            (true, RequestedRv::Unset)
                if cached < storage.head && !self.cache_delay.borrow().delay.is_zero() =>
            {
                Start::Initial {
                    wait_for: Some(storage.head),
                }
            }
            (true, _) => Start::Initial { wait_for: None },
            (false, RequestedRv::At(n)) => Start::After(n),
            (false, _) => Start::Now,
        }
    }

    /// A start below the history floor, as the expired-watch mode answers it: a 410 before
    /// the `200` (the `Err`), or the `ERROR` event the stream consists of (the `Some`).
    fn expired_start(
        &self,
        storage: &Storage,
        start: &Start,
    ) -> Result<Option<StatusError>, StatusError> {
        let expired_mode = self
            .faults
            .lock()
            .expired_watch
            .unwrap_or(self.config.expired_watch);
        let &Start::After(n) = start else {
            return Ok(None);
        };
        if n >= storage.floor {
            return Ok(None);
        }
        let status = StatusError::watch_too_old(
            &storage.codec.encode(n),
            &storage.codec.encode(storage.floor),
        );
        match expired_mode {
            ExpiredWatch::Http410 => Err(status),
            ExpiredWatch::ErrorEventGone => {
                Ok(Some(StatusError::gone(status.message().to_owned())))
            }
            ExpiredWatch::ErrorEvent => Ok(Some(status)),
        }
    }

    /// How long the watch lasts: `timeoutSeconds`, else kube-apiserver's random
    /// `[min-request-timeout, 2 × min-request-timeout)`.
    fn watch_timeout(&self, opts: &ListOptions) -> Duration {
        match opts.timeout_seconds {
            Some(s) if s > 0 => Duration::from_secs(s as u64),
            _ => {
                let min = self.config.min_request_timeout;
                let factor: f64 = rand::rng().random_range(1.0..2.0);
                min.mul_f64(factor)
            }
        }
    }

    /// What the stream begins with: the objects of a streaming list's initial events, the
    /// changes from the history to replay, and the revision through which live changes are
    /// skipped (they are in the initial events or the replay).
    fn starting_point(
        &self,
        storage: &Storage,
        r: usize,
        namespace: Option<&str>,
        start: &Start,
        requested: RequestedRv,
        filter: &Filter,
    ) -> (Vec<Arc<StoredObject>>, Vec<Arc<Change>>, u64) {
        match *start {
            Start::Initial { wait_for: None } => {
                // RV "0" is served from the (possibly lagging) cache; anything else is a
                // consistent read at the head.
                let at = if requested == RequestedRv::Zero {
                    self.cache_revision(storage)
                } else {
                    storage.head
                };
                let mut initial = Vec::new();
                storage.visit_at(r, at, namespace, None, &mut |key, obj| {
                    if filter.matches(key, obj) {
                        initial.push(obj.clone());
                    }
                    true
                });
                // The cache then catches up: the changes after its snapshot follow.
                (initial, storage.changes_since(r, at), at)
            }
            Start::Initial { wait_for: Some(_) } => (Vec::new(), Vec::new(), 0),
            Start::After(n) => (Vec::new(), storage.changes_since(r, n), n),
            Start::Now => (Vec::new(), Vec::new(), storage.head),
        }
    }
}

/// Whether a watch is a streaming list: `sendInitialEvents`, else (v1.34+ defaulting) a watch
/// from `""` or `"0"` without `resourceVersionMatch`.
fn sends_initial_events(opts: &ListOptions, requested: RequestedRv) -> bool {
    match opts.send_initial_events {
        Some(v) => v,
        None => {
            opts.resource_version_match.is_empty()
                && matches!(requested, RequestedRv::Unset | RequestedRv::Zero)
        }
    }
}

/// The `200` whose chunked body the watch task feeds through `rx`.
fn stream_response(rx: mpsc::Receiver<Chunk>) -> Result<Response, StatusError> {
    let body = Body::from_stream(BodyStream {
        rx,
        aborting: false,
    });
    Response::builder()
        .status(200)
        .header("content-type", "application/json")
        .body(body)
        .map_err(|e| StatusError::internal(&e.to_string()))
}

/// `{"type":<ty>,"object":<object>}\n`.
fn event_line(ty: &str, object: &Value) -> Bytes {
    let mut line = format!("{{\"type\":\"{ty}\",\"object\":").into_bytes();
    line.extend_from_slice(object.to_string().as_bytes());
    line.extend_from_slice(b"}\n");
    Bytes::from(line)
}

impl WatchTask {
    async fn run(mut self, initial: Vec<Arc<StoredObject>>, replay: Vec<Arc<Change>>) {
        if self.start_stream(initial, replay).await.is_ok() {
            self.live().await;
        }
    }

    async fn start_stream(
        &mut self,
        initial: Vec<Arc<StoredObject>>,
        replay: Vec<Arc<Change>>,
    ) -> Result<(), ()> {
        match self.start {
            Start::Initial { wait_for: Some(n) } => {
                // A streaming list not older than a revision the server has not reached yet:
                // wait, then either serve it or fail with 504 TooLarge as an ERROR event.
                if let Err(status) = self.shared.wait_for_revision(n).await {
                    let _ = self
                        .out
                        .send(Chunk::Data(event_line("ERROR", &status.to_json())))
                        .await;
                    return Err(());
                }
                let (at, objects, replay) = {
                    let storage = self.shared.storage.read();
                    let at = self.shared.cache_revision(&storage);
                    let mut objects = Vec::new();
                    storage.visit_at(self.resource, at, None, None, &mut |key, obj| {
                        if self.filter.matches(key, obj) {
                            objects.push(obj.clone());
                        }
                        true
                    });
                    // The changes the cache does not hold yet follow, and the live stream
                    // starts right after the head: resubscribe under the lock.
                    let replay = storage.changes_since(self.resource, at);
                    self.changes = storage.resources[self.resource].tx.subscribe();
                    (at, objects, replay)
                };
                self.skip_through = at;
                self.seen_rv = at;
                self.send_initial(objects).await?;
                self.replay(replay).await
            }
            Start::Initial { wait_for: None } => {
                self.send_initial(initial).await?;
                self.replay(replay).await
            }
            Start::After(_) => self.replay(replay).await,
            Start::Now => Ok(()),
        }
    }

    async fn replay(&mut self, replay: Vec<Arc<Change>>) -> Result<(), ()> {
        for change in replay {
            self.accept(change);
            if self.buffer.len() >= FLUSH_BYTES {
                self.flush().await?;
            }
        }
        self.flush().await
    }

    async fn send_initial(&mut self, objects: Vec<Arc<StoredObject>>) -> Result<(), ()> {
        for object in objects {
            self.push_event("ADDED", &object.body);
            if self.buffer.len() >= FLUSH_BYTES {
                self.flush().await?;
            }
        }
        if self.send_end_marker {
            let rv = self.skip_through;
            self.push_bookmark(rv, true);
        }
        self.flush().await
    }

    fn push_event(&mut self, ty: &str, body: &[u8]) {
        let start = self.buffer.len();
        self.buffer.extend_from_slice(b"{\"type\":\"");
        self.buffer.extend_from_slice(ty.as_bytes());
        self.buffer.extend_from_slice(b"\",\"object\":");
        write_typed(&mut self.buffer, &self.typed_prefix, body);
        self.buffer.extend_from_slice(b"}\n");
        self.last_event = Some(Bytes::copy_from_slice(&self.buffer[start..]));
    }

    fn push_bookmark(&mut self, rv: u64, end_marker: bool) {
        let mut metadata = serde_json::Map::new();
        metadata.insert(
            "resourceVersion".into(),
            Value::String(self.shared.config.codec().encode(rv)),
        );
        let null_filled = self.shared.config.bookmark_shape == BookmarkShape::NullFilled;
        if null_filled {
            metadata.insert("creationTimestamp".into(), Value::Null);
        }
        if end_marker {
            metadata.insert(
                "annotations".into(),
                serde_json::json!({ INITIAL_EVENTS_END: "true" }),
            );
        }
        let mut object = serde_json::Map::new();
        object.insert("kind".into(), Value::String(self.kind.clone()));
        object.insert("apiVersion".into(), Value::String(self.api_version.clone()));
        object.insert("metadata".into(), Value::Object(metadata));
        if null_filled && self.is_pod {
            object.insert("spec".into(), serde_json::json!({"containers": null}));
            object.insert("status".into(), serde_json::json!({}));
        }
        let line = event_line("BOOKMARK", &Value::Object(object));
        self.buffer.extend_from_slice(&line);
    }

    /// Takes a change as the watch cache would: processed now if it has been received and
    /// nothing before it waits, else queued until it is.
    fn accept(&mut self, change: Arc<Change>) {
        let cache = *self.delays.borrow();
        let received = cache.delay.is_zero() || cache.due(&change) <= Instant::now();
        if self.pending.is_empty() && received {
            self.process(&change);
        } else {
            self.pending.push_back(change);
        }
    }

    /// Processes the queued changes the watch cache has received by now, in order.
    fn release(&mut self) {
        let cache = *self.delays.borrow_and_update();
        let now = Instant::now();
        while self
            .pending
            .front()
            .is_some_and(|change| cache.due(change) <= now)
        {
            if let Some(change) = self.pending.pop_front() {
                self.process(&change);
            }
        }
    }

    /// When the oldest queued change is received, if one is queued.
    fn next_due(&self) -> Option<Instant> {
        let cache = *self.delays.borrow();
        self.pending.front().map(|change| cache.due(change))
    }

    /// Turns one committed change into the event this watcher sees, if any: selector
    /// transitions become ADDED (starts matching) or DELETED (stops matching, carrying the
    /// previous state stamped with the change's revision).
    fn process(&mut self, change: &Change) {
        self.seen_rv = self.seen_rv.max(change.rv);
        if change.rv <= self.skip_through {
            return;
        }
        let now =
            change.ty != ChangeType::Deleted && self.filter.matches(&change.key, &change.object);
        let before = change
            .previous
            .as_ref()
            .is_some_and(|p| self.filter.matches(&change.key, p));
        match change.ty {
            ChangeType::Added if now => self.push_event("ADDED", &change.object.body),
            ChangeType::Modified if now && before => {
                self.push_event("MODIFIED", &change.object.body);
            }
            ChangeType::Modified if now => self.push_event("ADDED", &change.object.body),
            ChangeType::Modified if before => {
                if let Some(previous) = &change.previous {
                    let mut value = previous.value.clone();
                    if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
                        meta.insert(
                            "resourceVersion".into(),
                            Value::String(self.shared.config.codec().encode(change.rv)),
                        );
                    }
                    let stamped = StoredObject::new(value);
                    self.push_event("DELETED", &stamped.body);
                }
            }
            ChangeType::Deleted if self.filter.matches(&change.key, &change.object) => {
                self.push_event("DELETED", &change.object.body);
            }
            _ => {}
        }
    }

    /// Writes the buffer, sliced and delayed if the stream is slowed.
    async fn flush(&mut self) -> Result<(), ()> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let data = Bytes::from(std::mem::replace(
            &mut self.buffer,
            Vec::with_capacity(FLUSH_BYTES),
        ));
        self.write(data).await
    }

    async fn write(&mut self, data: Bytes) -> Result<(), ()> {
        let slow = self.shared.faults.lock().slow_stream;
        match slow {
            None => self.out.send(Chunk::Data(data)).await.map_err(|_| ()),
            Some(slow) => {
                let mut rest = data;
                while !rest.is_empty() {
                    tokio::time::sleep(slow.delay).await;
                    let piece = rest.split_to(slow.chunk_bytes.min(rest.len()));
                    self.out.send(Chunk::Data(piece)).await.map_err(|_| ())?;
                }
                Ok(())
            }
        }
    }

    fn bookmarks_on(&self) -> bool {
        self.bookmarks && !self.shared.faults.lock().bookmarks_off
    }

    /// A bookmark at the highest revision this watcher is known to be complete up to: every
    /// change up to the head has been handed to our channel (commits send under the lock), so
    /// after draining it the head is safe.
    async fn bookmark(&mut self) -> Flow {
        let head = self.shared.storage.read().head;
        if let Flow::Stop = self.drain().await {
            return Flow::Stop;
        }
        // Not past a change still on its way to the cache.
        let rv = match self.pending.front() {
            Some(change) => change.rv - 1,
            None => head.max(self.seen_rv),
        };
        if rv >= self.skip_through && self.bookmarks_on() {
            self.push_bookmark(rv, false);
        }
        match self.flush().await {
            Ok(()) => Flow::Continue,
            Err(()) => Flow::Stop,
        }
    }

    /// Processes every change already queued for this watcher.
    async fn drain(&mut self) -> Flow {
        loop {
            match self.changes.try_recv() {
                Ok(change) => self.accept(change),
                Err(broadcast::error::TryRecvError::Empty) => return Flow::Continue,
                Err(broadcast::error::TryRecvError::Lagged(_)) => {
                    if let Flow::Stop = self.catch_up().await {
                        return Flow::Stop;
                    }
                }
                Err(broadcast::error::TryRecvError::Closed) => return Flow::Stop,
            }
        }
    }

    /// This watcher fell `watch_buffer` changes behind. With [`SlowWatcher::Close`] its stream
    /// ends, as kube-apiserver ends slow watchers. With [`SlowWatcher::Block`] it is fed what
    /// it missed from the history and follows the live changes again (resubscribed under the
    /// same lock, so nothing falls between), unless the history no longer holds it all.
    async fn catch_up(&mut self) -> Flow {
        if self.shared.config.slow_watcher == SlowWatcher::Close {
            return Flow::Stop;
        }
        let missed = {
            let storage = self.shared.storage.read();
            // Everything of this resource up to here was processed or is queued.
            let through = self.pending.back().map_or(self.seen_rv, |change| change.rv);
            if through < storage.floor {
                return Flow::Stop;
            }
            self.changes = storage.resources[self.resource].tx.subscribe();
            storage.changes_since(self.resource, through)
        };
        match self.replay(missed).await {
            Ok(()) => Flow::Continue,
            Err(()) => Flow::Stop,
        }
    }

    async fn handle_control(&mut self, control: Control) -> Flow {
        match control {
            Control::Drop => {
                let _ = self.flush().await;
                let _ = self.out.send(Chunk::Abort).await;
                Flow::Stop
            }
            Control::DropMidEvent => {
                let _ = self.flush().await;
                let _ = self
                    .write(Bytes::from_static(
                        b"{\"type\":\"MODIFIED\",\"object\":{\"kind\":\"Po",
                    ))
                    .await;
                let _ = self.out.send(Chunk::Abort).await;
                Flow::Stop
            }
            Control::Close => {
                let _ = self.flush().await;
                Flow::Stop
            }
            Control::Error(object) => {
                let _ = self.flush().await;
                let _ = self.write(event_line("ERROR", &object)).await;
                Flow::Stop
            }
            Control::Torn => {
                let _ = self.flush().await;
                let _ = self
                    .write(Bytes::from_static(
                        b"{\"type\":\"MODIFIED\",\"object\":{\"kind\":\"Po",
                    ))
                    .await;
                Flow::Stop
            }
            Control::Garbage => match self.write(Bytes::from_static(b"this is not json\n")).await {
                Ok(()) => Flow::Continue,
                Err(()) => Flow::Stop,
            },
            Control::Duplicate => {
                let Some(last) = self.last_event.clone() else {
                    return Flow::Continue;
                };
                match self.write(last).await {
                    Ok(()) => Flow::Continue,
                    Err(()) => Flow::Stop,
                }
            }
        }
    }

    /// Waits for the next change of the isolated clients; never returns for a watch without a
    /// client identity.
    async fn isolation_changed(client: &mut Option<(String, watch::Receiver<u64>)>) {
        match client {
            Some((_, changes)) => {
                if changes.changed().await.is_err() {
                    // The server is gone; the shutdown arm ends the watch.
                    std::future::pending::<()>().await;
                }
            }
            None => std::future::pending().await,
        }
    }

    /// Follows the isolation of this watch's client: nothing to do while it is not isolated;
    /// a failing client's watch is cut; a hung client's watch delivers nothing until the
    /// client is healed (or fails). While hung, a fault that would end the stream, a restart
    /// or a shutdown drops the connection (none of what it would write reaches the client);
    /// other watch faults are ignored.
    async fn follow_isolation(&mut self) -> Flow {
        let shutdown = self.shared.shutdown.clone();
        loop {
            let Some((client, changes)) = self.client.as_mut() else {
                return Flow::Continue;
            };
            changes.borrow_and_update();
            match self.shared.isolation_of(client) {
                None => return Flow::Continue,
                Some(Isolation::Fail(_)) => {
                    let _ = self.out.send(Chunk::Abort).await;
                    return Flow::Stop;
                }
                Some(Isolation::Hang) => {}
            }
            let abort = tokio::select! {
                biased;
                () = self.out.closed() => return Flow::Stop,
                () = shutdown.cancelled() => true,
                changed = changes.changed() => changed.is_err(),
                control = self.control.recv() => match control {
                    Ok(Control::Garbage | Control::Duplicate)
                    | Err(broadcast::error::RecvError::Lagged(_)) => false,
                    Ok(_) | Err(broadcast::error::RecvError::Closed) => true,
                },
            };
            if abort {
                let _ = self.out.send(Chunk::Abort).await;
                return Flow::Stop;
            }
        }
    }

    async fn live(mut self) {
        // The client may have been isolated since its request passed the isolation gate.
        if let Flow::Stop = self.follow_isolation().await {
            return;
        }
        let interval = self.shared.config.bookmark_interval;
        let mut next_bookmark = Instant::now() + interval;
        let before = self.shared.config.bookmark_before_deadline;
        let mut final_bookmark = self
            .deadline
            .checked_sub(before)
            .filter(|t| *t > Instant::now());
        let shutdown = self.shared.shutdown.clone();
        loop {
            let bookmark_at = match final_bookmark {
                Some(t) if t < next_bookmark => t,
                _ => next_bookmark,
            };
            let due = self.next_due();
            let flow = tokio::select! {
                biased;
                () = self.out.closed() => Flow::Stop,
                () = shutdown.cancelled() => Flow::Stop,
                () = Self::isolation_changed(&mut self.client) => self.follow_isolation().await,
                control = self.control.recv() => match control {
                    Ok(control) => self.handle_control(control).await,
                    Err(broadcast::error::RecvError::Lagged(_)) => Flow::Continue,
                    Err(broadcast::error::RecvError::Closed) => Flow::Stop,
                },
                () = tokio::time::sleep_until(self.deadline) => {
                    let _ = self.flush().await;
                    Flow::Stop
                }
                change = self.changes.recv() => self.on_change(change).await,
                () = sleep_until_some(due) => self.release_due().await,
                changed = self.delays.changed() => match changed {
                    Ok(()) => self.release_due().await,
                    Err(_) => Flow::Stop,
                },
                () = tokio::time::sleep_until(bookmark_at) => {
                    if final_bookmark == Some(bookmark_at) {
                        final_bookmark = None;
                    } else {
                        next_bookmark += interval;
                    }
                    if self.bookmarks {
                        self.bookmark().await
                    } else {
                        Flow::Continue
                    }
                }
            };
            if let Flow::Stop = flow {
                return;
            }
        }
    }

    /// A change from the live stream (or the end of it): it and whatever else is queued,
    /// gathered into one write.
    async fn on_change(
        &mut self,
        change: Result<Arc<Change>, broadcast::error::RecvError>,
    ) -> Flow {
        let change = match change {
            Ok(change) => change,
            Err(broadcast::error::RecvError::Lagged(_)) => return self.catch_up().await,
            Err(broadcast::error::RecvError::Closed) => {
                let _ = self.flush().await;
                return Flow::Stop;
            }
        };
        self.accept(change);
        let mut flow = Flow::Continue;
        while self.buffer.len() < FLUSH_BYTES {
            match self.changes.try_recv() {
                Ok(change) => self.accept(change),
                Err(broadcast::error::TryRecvError::Empty) => break,
                Err(broadcast::error::TryRecvError::Lagged(_)) => {
                    flow = self.catch_up().await;
                    break;
                }
                Err(broadcast::error::TryRecvError::Closed) => {
                    flow = Flow::Stop;
                    break;
                }
            }
        }
        match (flow, self.flush().await) {
            (Flow::Continue, Ok(())) => Flow::Continue,
            _ => Flow::Stop,
        }
    }

    /// Sends the changes the watch cache has received by now (see `Faults::set_cache_delay`).
    async fn release_due(&mut self) -> Flow {
        self.release();
        match self.flush().await {
            Ok(()) => Flow::Continue,
            Err(()) => Flow::Stop,
        }
    }
}

/// Sleeps until `at`, or forever without one.
async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
