//! A running watch: the task that writes one watch stream (initial events, the replayed
//! history, live changes, bookmarks) and follows the watch faults and its client's isolation.
//! `watch` opens it.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use serde_json::Value;
use tokio::sync::{broadcast, mpsc, watch};
use tokio::time::Instant;

use crate::config::SlowWatcher;
use crate::faults::{Control, Isolation};
use crate::selector::{FieldSelector, LabelSelector};
use crate::shard::{ShardFilter, selects};
use crate::state::Shared;
use crate::storage::{CacheDelay, Change, ChangeType, StoredObject};
use crate::watch_events::{Encoding, bookmark_line, event_line};

/// Bytes gathered before a write is handed to the connection.
pub(crate) const FLUSH_BYTES: usize = 64 * 1024;

/// What the watch task hands to the response body.
pub(crate) enum Chunk {
    /// Bytes for the body.
    Data(Bytes),
    /// Abort the connection once everything before has been flushed.
    Abort,
}

/// Where the stream starts.
pub(crate) enum Start {
    /// Synthetic ADDED events for the current state, then changes after it.
    Initial { wait_for: Option<u64> },
    /// Changes after the given revision.
    After(u64),
    /// Changes after the current head.
    Now,
}

/// What a watcher sees: objects in its namespace that its selectors select.
pub(crate) struct Filter {
    pub(crate) namespace_prefix: Option<String>,
    pub(crate) labels: LabelSelector,
    pub(crate) fields: FieldSelector,
    /// The shard selector. It hashes `metadata.uid` or `metadata.namespace`, which no update
    /// changes: an object never moves in or out of a watch's shard, so no event turns into
    /// another for it (unlike a label selector's transitions).
    pub(crate) shard: Option<ShardFilter>,
}

impl Filter {
    pub(crate) fn matches(&self, key: &str, object: &StoredObject) -> bool {
        self.namespace_prefix
            .as_deref()
            .is_none_or(|p| key.starts_with(p))
            && self.labels.matches(&object.value)
            && self.fields.matches(&object.value)
            && selects(self.shard.as_ref(), &object.value)
    }
}

/// Decrements the open-watch count when the task ends, however it ends.
pub(crate) struct OpenWatch(pub(crate) Arc<Shared>);

impl Drop for OpenWatch {
    fn drop(&mut self) {
        self.0.open_watches.fetch_sub(1, Ordering::SeqCst);
    }
}

/// One open watch: the task that writes its stream.
pub(crate) struct WatchTask {
    pub(crate) shared: Arc<Shared>,
    pub(crate) resource: usize,
    pub(crate) typed_prefix: Bytes,
    /// JSON lines or protobuf frames.
    pub(crate) encoding: Encoding,
    pub(crate) kind: String,
    pub(crate) api_version: String,
    pub(crate) is_pod: bool,
    pub(crate) filter: Filter,
    pub(crate) bookmarks: bool,
    pub(crate) send_end_marker: bool,
    pub(crate) start: Start,
    pub(crate) deadline: Instant,
    pub(crate) out: mpsc::Sender<Chunk>,
    pub(crate) changes: broadcast::Receiver<Arc<Change>>,
    pub(crate) control: broadcast::Receiver<Control>,
    /// Live changes at or below this revision are not sent.
    pub(crate) skip_through: u64,
    /// The revision of the last change processed (sent or filtered out).
    pub(crate) seen_rv: u64,
    pub(crate) buffer: Vec<u8>,
    /// Changes the watch cache has not received yet (see `Faults::set_cache_delay`), oldest
    /// first; as many as were committed within the delay.
    pub(crate) pending: VecDeque<Arc<Change>>,
    pub(crate) delays: watch::Receiver<CacheDelay>,
    /// The last event sent (its type and object), written again by the duplicate fault.
    pub(crate) last_event: Option<(&'static str, Arc<StoredObject>)>,
    /// The client that opened the watch (see [`crate::isolation::client_of`]), and the
    /// isolation changes to follow for it.
    pub(crate) client: Option<(String, watch::Receiver<u64>)>,
    pub(crate) _open: OpenWatch,
}

/// Whether the stream goes on after a step.
enum Flow {
    Continue,
    Stop,
}

impl Flow {
    /// Goes on after a write that reached the body, stops after one that did not.
    fn after(written: Result<(), ()>) -> Flow {
        match written {
            Ok(()) => Flow::Continue,
            Err(()) => Flow::Stop,
        }
    }
}

impl WatchTask {
    /// Writes the stream: its beginning (initial events, replayed history), then live
    /// changes until the watch ends.
    pub(crate) async fn run(mut self, initial: Vec<Arc<StoredObject>>, replay: Vec<Arc<Change>>) {
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
                    if storage.check_served(self.resource).is_err() {
                        // Unregistered while it waited: the stream ends, as the others do.
                        return Err(());
                    }
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
            self.push_event("ADDED", &object);
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

    fn push_event(&mut self, ty: &'static str, object: &Arc<StoredObject>) {
        self.encoding
            .write_event(&mut self.buffer, ty, &self.typed_prefix, object);
        self.last_event = Some((ty, Arc::clone(object)));
    }

    fn push_bookmark(&mut self, rv: u64, end_marker: bool) {
        let config = &self.shared.config;
        let line = bookmark_line(
            config,
            &self.kind,
            &self.api_version,
            self.is_pod,
            rv,
            end_marker,
        );
        let line = self.encoding.line(line);
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
            ChangeType::Added if now => self.push_event("ADDED", &change.object),
            ChangeType::Modified if now && before => {
                self.push_event("MODIFIED", &change.object);
            }
            ChangeType::Modified if now => self.push_event("ADDED", &change.object),
            ChangeType::Modified if before => {
                if let Some(previous) = &change.previous {
                    let mut value = previous.value.clone();
                    if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
                        meta.insert(
                            "resourceVersion".into(),
                            Value::String(self.shared.config.codec().encode(change.rv)),
                        );
                    }
                    let stamped = Arc::new(StoredObject::new(value));
                    self.push_event("DELETED", &stamped);
                }
            }
            ChangeType::Deleted if self.filter.matches(&change.key, &change.object) => {
                self.push_event("DELETED", &change.object);
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
        Flow::after(self.flush().await)
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
            if storage.check_served(self.resource).is_err() {
                return Flow::Stop;
            }
            // Everything of this resource up to here was processed or is queued.
            let through = self.pending.back().map_or(self.seen_rv, |change| change.rv);
            if through < storage.floor {
                return Flow::Stop;
            }
            self.changes = storage.resources[self.resource].tx.subscribe();
            storage.changes_since(self.resource, through)
        };
        Flow::after(self.replay(missed).await)
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
                let _ = self.write(self.encoding.half_event()).await;
                let _ = self.out.send(Chunk::Abort).await;
                Flow::Stop
            }
            Control::Close => {
                let _ = self.flush().await;
                Flow::Stop
            }
            Control::Error(object) => {
                let _ = self.flush().await;
                let line = self.encoding.line(event_line("ERROR", &object));
                let _ = self.write(line).await;
                Flow::Stop
            }
            Control::Torn => {
                let _ = self.flush().await;
                let _ = self.write(self.encoding.half_event()).await;
                Flow::Stop
            }
            Control::Garbage => {
                let garbage = self
                    .encoding
                    .line(Bytes::from_static(b"this is not json\n"));
                Flow::after(self.write(garbage).await)
            }
            Control::Duplicate => {
                let Some((ty, object)) = self.last_event.clone() else {
                    return Flow::Continue;
                };
                let mut event = Vec::new();
                self.encoding
                    .write_event(&mut event, ty, &self.typed_prefix, &object);
                Flow::after(self.write(Bytes::from(event)).await)
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
        Flow::after(self.flush().await)
    }
}

/// Sleeps until `at`, or forever without one.
async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
