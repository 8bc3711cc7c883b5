//! `GET <collection>?watch=1`: newline-delimited JSON events over a chunked response.
//!
//! Each watch runs as one task (see `watch_stream`) that writes into a small channel read by
//! the response body. When the client goes away the body is dropped, the channel closes, and
//! the task ends at once (it waits on `closed()`), releasing its subscription: a disconnect
//! costs nothing.

use std::collections::VecDeque;
use std::io;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use rand::Rng;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::codec::Output;
use crate::config::ExpiredWatch;
use crate::query::{ListOptions, RequestedRv};
use crate::selector::{FieldSelector, LabelSelector};
use crate::state::Shared;
use crate::status::StatusError;
use crate::storage::{Change, Storage, StoredObject};
use crate::watch_events::{Encoding, event_line};
use crate::watch_stream::{Chunk, FLUSH_BYTES, Filter, OpenWatch, Start, WatchTask};

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

impl Shared {
    /// Starts a watch, or fails before the `200` (bad selectors, bad resource version, an
    /// expired start in [`ExpiredWatch::Http410`] mode).
    pub(crate) fn watch(
        self: &Arc<Self>,
        r: usize,
        namespace: Option<&str>,
        opts: &ListOptions,
        client: Option<String>,
        output: Output,
    ) -> Result<Response, StatusError> {
        let storage = self.storage.read();
        storage.check_served(r)?;
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
        let encoding = Encoding::new(output, &info.api_version(), &info.kind);
        let response = stream_response(rx, encoding.content_type())?;

        if let Some(status) = early_error {
            drop(guard);
            let line = encoding.line(event_line("ERROR", &status.to_json()));
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
            shard: opts.shard.clone(),
        };
        let (initial, replay, skip_through) =
            self.starting_point(&storage, r, namespace, &start, requested, &filter);
        let task = WatchTask {
            shared: self.clone(),
            resource: r,
            typed_prefix: state.typed_prefix.clone(),
            encoding,
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
fn stream_response(
    rx: mpsc::Receiver<Chunk>,
    content_type: &'static str,
) -> Result<Response, StatusError> {
    let body = Body::from_stream(BodyStream {
        rx,
        aborting: false,
    });
    Response::builder()
        .status(200)
        .header("content-type", content_type)
        .body(body)
        .map_err(|e| StatusError::internal(&e.to_string()))
}
