//! The reflector layer of the informers stack: list and watch one collection from the API server
//! and keep a store (or a queue) equal to the server's state, through every failure a real
//! cluster produces.
//!
//! In the pipeline
//!
//! ```text
//! API server ──list/watch──▶ Reflector (this crate) ──add/update/delete/replace──▶ DeltaFifo or store
//!            (ListerWatcher)
//! ```
//!
//! * [`ListerWatcher`] is the reflector's view of the API: one list page, one watch stream, with
//!   this crate's own plain types ([`ListParams`], [`ListPage`], [`WatchParams`],
//!   [`WatchEvent`], [`Status`]) and a typed [`Error`] whose [`ErrorKind`] tells the reflector
//!   how to react. The kube-client adapter lives in `informer-kube`; nothing here depends on
//!   kube.
//! * [`Reflector`] runs client-go's list-and-watch algorithm and writes only through
//!   `informer_store::ReflectorStore`, so it feeds a plain store or a queue alike.
//! * [`FakeListerWatcher`] is a scriptable in-memory `ListerWatcher` for tests.
//!
//! Every wait (backoff, Retry-After, resync) runs on tokio's clock, so tests drive it with a
//! paused clock.
//!
//! # Example
//!
//! A reflector keeps a store in step with a (scripted) server:
//!
//! ```
//! use std::sync::Arc;
//! use informer_reflector::{FakeListerWatcher, ListPage, Reflector, WatchEvent, WatchStep};
//! use informer_store::{key_func, KnownObjects, ThreadSafeStore};
//! use tokio_util::sync::CancellationToken;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let server = Arc::new(FakeListerWatcher::new());
//! let obj = |name: &str| Arc::new(name.to_string());
//! server.push_list(ListPage::new(vec![obj("a"), obj("b")], "10"));
//! // A watch with two events that then closes; the reflector resumes with a second watch.
//! server.push_watch(vec![
//!     WatchStep::Event(WatchEvent::added(obj("c"), "11")),
//!     WatchStep::Event(WatchEvent::deleted(obj("a"), "12")),
//! ]);
//! server.push_watch(vec![WatchStep::Hang]);
//!
//! let store = Arc::new(ThreadSafeStore::new(key_func(|s: &String| Ok(s.clone()))));
//! let reflector = Arc::new(Reflector::new(server.clone(), store.clone()));
//! let stop = CancellationToken::new();
//! let run = tokio::spawn({
//!     let (reflector, stop) = (reflector.clone(), stop.clone());
//!     async move { reflector.run(stop).await }
//! });
//!
//! // The list, the first watch, and the watch resumed once the first one had been applied.
//! server.wait_for_requests(3).await;
//! assert_eq!(reflector.last_sync_resource_version(), "12");
//! assert_eq!(server.requests()[2].resource_version(), "12");
//! let mut keys = store.list_keys();
//! keys.sort();
//! assert_eq!(keys, ["b", "c"]);
//!
//! stop.cancel();
//! run.await.unwrap();
//! # }
//! ```

mod availability;
mod backoff;
mod boxed;
mod error;
mod fake;
mod lister_watcher;
mod listing;
mod observer;
mod reaction;
mod reflector;
mod sharding;
mod watching;

pub use crate::availability::{Availability, NOT_SERVED_POLL};
pub use crate::backoff::BackoffConfig;
pub use crate::boxed::BoxListerWatcher;
pub use crate::error::{
    BoxError, CAUSE_RESOURCE_VERSION_TOO_LARGE, Error, ErrorKind, Status, StatusCause,
};
pub use crate::fake::{FakeListerWatcher, Request, WatchStep};
pub use crate::lister_watcher::{
    Backlogged, HandOver, LOOK_AGAIN, ListFilter, ListPage, ListParams, ListSink, ListerWatcher,
    ResourceVersionMatch, WatchEvent, WatchParams, WatchStream,
};
pub use crate::observer::{EventType, ListOutcome, ListReason, ReflectorObserver, WatchEnd};
pub use crate::reflector::{
    DEFAULT_MIN_WATCH_TIMEOUT, DEFAULT_PAGE_SIZE, HEALTHY_WATCH, ListInterner, Reflector,
    ShouldResync, WATCH_DOWN_WARNING, WatchErrorHandler, default_watch_error_handler,
};
pub use crate::sharding::{ServerFiltering, ShardBy};
pub use informer_shard::{ShardField, ShardSelector};

/// `Result` with this crate's [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod send_sync {
    use super::*;
    use std::sync::Arc;

    const fn assert_send_sync<T: Send + Sync>() {}
    const _: () = assert_send_sync::<FakeListerWatcher<String>>();
    const _: () = assert_send_sync::<
        Reflector<
            String,
            Arc<FakeListerWatcher<String>>,
            Arc<informer_store::ThreadSafeStore<String>>,
        >,
    >();
    const _: () = assert_send_sync::<Error>();
    const _: () = assert_send_sync::<WatchEvent<String>>();

    #[allow(dead_code, reason = "compile-time check only")]
    fn run_future_is_send(
        r: &'static Reflector<
            String,
            Arc<FakeListerWatcher<String>>,
            Arc<informer_store::ThreadSafeStore<String>>,
        >,
    ) -> impl std::future::Future<Output = ()> + Send {
        r.run(tokio_util::sync::CancellationToken::new())
    }
}
