//! The shared state of a running server: storage, the fault state, the channels watches and
//! waiters follow, and the request record. The bottom of the server's layers: it knows
//! nothing of HTTP, routing or the handles.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize};

use parking_lot::{Mutex, RwLock};
use tokio::sync::{broadcast, mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::faults::{Control, FaultState, Isolation};
use crate::status::StatusError;
use crate::storage::{CacheDelay, Storage};

/// The state of a running server, shared by its handles ([`ApiServer`](crate::ApiServer),
/// [`Faults`](crate::Faults)), the router and every open watch. The operations on it live with
/// what they serve: object writes in `objects` and `deletion`, lists in `list`, watches in
/// `watch` and `watch_stream`.
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
    /// The `uid`s of removed objects, for the garbage collector (with
    /// [`Config::garbage_collection`]); its end, until the collector takes it.
    pub(crate) removed: Option<mpsc::UnboundedSender<String>>,
    pub(crate) removed_queue: Mutex<Option<mpsc::UnboundedReceiver<String>>>,
    /// The link every response goes out on (see [`Config::bandwidth`]).
    pub(crate) link: Arc<crate::bandwidth::Link>,
}

/// One resource request as it arrived (see
/// [`ApiServer::record_requests`](crate::ApiServer::record_requests)).
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
        let (removed, removed_queue) = if config.garbage_collection {
            let (tx, rx) = mpsc::unbounded_channel();
            (Some(tx), Some(rx))
        } else {
            (None, None)
        };
        let link = Arc::new(crate::bandwidth::Link::new(config.bandwidth));
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
            removed,
            removed_queue: Mutex::new(removed_queue),
            link,
        })
    }

    /// The isolation of `client`, if it is isolated.
    pub(crate) fn isolation_of(&self, client: &str) -> Option<Isolation> {
        self.faults.lock().isolated.get(client).cloned()
    }

    /// Wakes everything waiting on an isolation: held requests and watches of isolated clients.
    pub(crate) fn isolation_changed(&self) {
        self.isolation.send_modify(|generation| *generation += 1);
    }

    /// The watch cache's revision: the head, less the injected lag, and without the changes
    /// the cache has not received yet (see `Faults::set_cache_delay`); never below the floor.
    pub(crate) fn cache_revision(&self, storage: &Storage) -> u64 {
        let lag = self.faults.lock().cache_lag;
        let cache = *self.cache_delay.borrow();
        let mut revision = storage.head.saturating_sub(lag);
        if !cache.delay.is_zero() {
            revision = revision.min(storage.delivered_revision(Instant::now(), &cache));
        }
        revision.max(storage.floor)
    }

    /// Waits until the watch cache holds `rv`, up to the configured wait; then 504 TooLarge.
    pub(crate) async fn wait_for_revision(&self, rv: u64) -> Result<(), StatusError> {
        let deadline = Instant::now() + self.config.too_large_wait;
        let reached = tokio::time::timeout_at(deadline, self.cache_reaches(rv)).await;
        match reached {
            Ok(()) => Ok(()),
            Err(_) => {
                let codec = self.config.codec();
                let cached = self.cache_revision(&self.storage.read());
                Err(StatusError::too_large_resource_version(
                    &codec.encode(rv),
                    &codec.encode(cached),
                ))
            }
        }
    }

    /// Returns once the watch cache holds `rv`: the head, less the lag, has reached it, and
    /// the change at or below it has been received.
    async fn cache_reaches(&self, rv: u64) {
        let lag = self.faults.lock().cache_lag;
        let mut head = self.head.subscribe();
        let mut delays = self.cache_delay.subscribe();
        if head
            .wait_for(|h| h.saturating_sub(lag) >= rv)
            .await
            .is_err()
        {
            // The server is gone; the caller's timeout ends the wait.
            std::future::pending::<()>().await;
        }
        loop {
            let cache = *delays.borrow_and_update();
            let due = self.storage.read().delivered_at(rv, &cache);
            match due {
                Some(due) if due > Instant::now() => {
                    tokio::select! {
                        () = tokio::time::sleep_until(due) => {}
                        _ = delays.changed() => {}
                    }
                }
                _ => return,
            }
        }
    }
}
