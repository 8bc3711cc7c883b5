//! The [`Faults`] handle: fault injection on a running server, on command.
//!
//! Every method takes effect at once: watch faults hit every watch open at the time of the
//! call; request faults hit the next matching requests.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

use crate::config::ExpiredWatch;
use crate::faults::{Control, Failure, Isolation, RemainingItemCount, SlowStream, Verb};
use crate::state::Shared;
use crate::status::StatusError;
use crate::storage::CacheDelay;

/// The fault controls of a running server (from [`ApiServer::faults`](crate::ApiServer::faults)).
#[derive(Clone)]
pub struct Faults {
    pub(crate) shared: Arc<Shared>,
}

impl std::fmt::Debug for Faults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Faults")
            .field("state", &*self.shared.faults.lock())
            .finish()
    }
}

impl Faults {
    fn broadcast(&self, control: Control) {
        // No receivers: no open watch, nothing to do.
        let _ = self.shared.control.send(control);
    }

    /// Aborts every open watch connection mid-stream (no chunked terminator), like a load
    /// balancer reset or a crashed server.
    pub fn drop_watches(&self) {
        self.broadcast(Control::Drop);
    }

    /// Writes the first half of an event on every open watch, then aborts the connection: the
    /// client is left with a partial JSON object and a transport error.
    pub fn drop_watches_mid_event(&self) {
        self.broadcast(Control::DropMidEvent);
    }

    /// Ends every open watch cleanly, like a server-side timeout.
    pub fn close_watches(&self) {
        self.broadcast(Control::Close);
    }

    /// Sends an `ERROR` event carrying `status` on every open watch, then ends it.
    pub fn inject_watch_error(&self, status: StatusError) {
        self.broadcast(Control::Error(Arc::new(status.to_json())));
    }

    /// Sends an `ERROR` event whose object is arbitrary JSON (e.g. `{}`, not a Status).
    pub fn inject_watch_error_object(&self, object: Value) {
        self.broadcast(Control::Error(Arc::new(object)));
    }

    /// Writes half of an event (`{"type":"MODIFIED","object":{"kind":"Po`) on every open
    /// watch, then ends the body cleanly.
    pub fn torn_event(&self) {
        self.broadcast(Control::Torn);
    }

    /// Writes a line that is not JSON on every open watch; the stream goes on.
    pub fn garbage_line(&self) {
        self.broadcast(Control::Garbage);
    }

    /// Sends the last event each open watch delivered once more (a duplicate).
    pub fn duplicate_last_event(&self) {
        self.broadcast(Control::Duplicate);
    }

    /// Fails the next `times` requests of `verb` with `failure`.
    pub fn fail_next(&self, verb: Verb, times: usize, failure: Failure) {
        if times > 0 {
            self.shared
                .faults
                .lock()
                .failures
                .push((verb, times, failure));
        }
    }

    /// Isolates one client: its requests fail or hang (see [`Isolation`]) while every other
    /// client is served as before. A client is who kube-apiserver would take it to be: the
    /// bearer token of its `Authorization: Bearer <token>` header; a request without a token
    /// is addressed by its `User-Agent`. Requests with neither are never isolated.
    ///
    /// Applies to every request of the client, discovery included, before any other fault
    /// (so an isolated client does not use up failures queued with [`Faults::fail_next`]),
    /// and at once to its open watches. Isolating an isolated client again replaces its
    /// isolation; held requests then follow the new one.
    pub fn isolate(&self, client: &str, isolation: Isolation) {
        self.shared
            .faults
            .lock()
            .isolated
            .insert(client.to_owned(), isolation);
        self.shared.isolation_changed();
    }

    /// Ends the isolation of `client`: held requests are served (late, as after a network
    /// partition heals), hung watches deliver what they held back, new requests are served.
    pub fn heal(&self, client: &str) {
        self.shared.faults.lock().isolated.remove(client);
        self.shared.isolation_changed();
    }

    /// Ends the isolation of every client.
    pub fn heal_all(&self) {
        self.shared.faults.lock().isolated.clear();
        self.shared.isolation_changed();
    }

    /// Forgets every queued failure.
    pub fn clear_failures(&self) {
        self.shared.faults.lock().failures.clear();
    }

    /// Delays every resource request by `latency` before it is served.
    pub fn set_latency(&self, latency: Duration) {
        self.shared.faults.lock().latency = latency;
    }

    /// Limits every response body from now on (also of the watches already open) to
    /// `bytes_per_second` together, or lifts the limit with `None`: see
    /// [`Config::bandwidth`](crate::Config::bandwidth).
    pub fn set_bandwidth(&self, bytes_per_second: Option<u64>) {
        self.shared.link.set_rate(bytes_per_second);
    }

    /// Slows every watch stream (also those already open), or restores full speed with `None`.
    pub fn set_slow_stream(&self, slow: Option<SlowStream>) {
        self.shared.faults.lock().slow_stream = slow.map(|s| SlowStream {
            chunk_bytes: s.chunk_bytes.max(1),
            ..s
        });
    }

    /// Turns periodic and pre-deadline bookmarks on or off. The initial-events-end bookmark of
    /// a streaming list is part of the protocol and is always sent.
    pub fn set_bookmarks(&self, enabled: bool) {
        self.shared.faults.lock().bookmarks_off = !enabled;
    }

    /// Changes how a watch from a too-old resource version fails.
    pub fn set_expired_watch(&self, mode: ExpiredWatch) {
        self.shared.faults.lock().expired_watch = Some(mode);
    }

    /// Makes every list and watch fail with `429 TooManyRequests` ("storage is
    /// (re)initializing") and `Retry-After: retry_after`, or serves normally again with `None`.
    pub fn set_unavailable(&self, retry_after: Option<u32>) {
        self.shared.faults.lock().unavailable = retry_after;
    }

    /// Makes the watch cache lag `revisions` behind the head (0: no lag). Reads that may be
    /// stale — lists and watches at `resourceVersion="0"` — are served at the cache's revision
    /// (never below the history floor), and reads not older than a revision the cache has not
    /// reached wait for it (up to [`Config::too_large_wait`](crate::Config::too_large_wait),
    /// then 504 TooLarge). Consistent reads (`resourceVersion` unset) still see the head, as
    /// kube-apiserver falls back to etcd for them; watch events are not delayed (for that, see
    /// [`Faults::set_cache_delay`]).
    pub fn set_cache_lag(&self, revisions: u64) {
        self.shared.faults.lock().cache_lag = revisions;
    }

    /// Makes the watch cache receive each change `delay` after its commit (zero: at once), as
    /// a watch cache fed by a slow etcd watch does. Until then no watch sees the change (nor a
    /// bookmark past it), lists and watches at `resourceVersion="0"` are served without it, and
    /// reads not older than its revision wait for it (then 504 TooLarge, after
    /// [`Config::too_large_wait`](crate::Config::too_large_wait)); consistent lists still see
    /// the head, and a consistent streaming list waits until the cache has the head. Changes
    /// come in commit order, so a client sees its own writes late but never out of order. Works
    /// with [`Faults::set_cache_lag`]: the cache is then as old as the older of the two makes it.
    /// Lowering the delay releases what is due at once, to every watch.
    pub fn set_cache_delay(&self, delay: Duration) {
        let storage = self.shared.storage.read();
        let received_through =
            storage.delivered_revision(Instant::now(), &self.shared.cache_delay.borrow());
        self.shared.cache_delay.send_replace(CacheDelay {
            delay,
            received_through,
        });
    }

    /// Changes what the pages of a paginated list say in `metadata.remainingItemCount`: a
    /// count that is wrong on purpose, or none. Pages that carry no count (the last page, or a
    /// list with selectors) still carry none.
    pub fn set_remaining_item_count(&self, count: RemainingItemCount) {
        self.shared.faults.lock().remaining_item_count = count;
    }

    /// Compacts the history up to `revision` (clamped to the head): older lists, continue
    /// tokens and watch starts get `410 Expired`. Returns the new floor.
    pub fn compact(&self, revision: u64) -> u64 {
        self.shared.storage.write().compact(revision)
    }

    /// Compacts everything: only the current revision remains valid.
    pub fn compact_all(&self) -> u64 {
        let mut storage = self.shared.storage.write();
        let head = storage.head;
        storage.compact(head)
    }

    /// A restart: every watch is aborted and the history is lost, so every older resource
    /// version is expired. Objects and the revision counter survive (they live in etcd).
    /// Requests held for a hung client are dropped (their connections closed unanswered).
    pub fn restart(&self) {
        self.shared.storage.write().reset_history();
        self.shared.faults.lock().restarts += 1;
        self.shared.isolation_changed();
        self.broadcast(Control::Drop);
    }

    /// A watch-cache re-initialisation: every watch ends cleanly and the history is lost.
    pub fn reinitialize_cache(&self) {
        self.shared.storage.write().reset_history();
        self.broadcast(Control::Close);
    }

    /// An etcd restore from an old snapshot *without* a revision bump: every object goes back
    /// to its state at `revision`, the head moves back to it (later writes reuse revisions
    /// clients have already seen), and every watch ends cleanly. Watches resumed from a
    /// "future" revision then wait silently; lists not older than it get 504 TooLarge.
    /// Returns `false` (and changes nothing) when `revision` is below the history floor or
    /// above the head.
    pub fn rewind_to(&self, revision: u64) -> bool {
        let head = {
            let mut storage = self.shared.storage.write();
            if storage.rewind(revision).is_err() {
                return false;
            }
            storage.head
        };
        self.shared.head.send_replace(head);
        self.broadcast(Control::Close);
        true
    }

    /// An etcd restore done right: the revision jumps forward by `delta`, everything before it
    /// is compacted, and every watch ends cleanly.
    pub fn bump_revision(&self, delta: u64) {
        let head = {
            let mut storage = self.shared.storage.write();
            storage.bump_revision(delta);
            storage.head
        };
        self.shared.head.send_replace(head);
        self.broadcast(Control::Close);
    }
}
