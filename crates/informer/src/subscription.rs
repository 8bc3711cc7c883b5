//! Async consumers: [`Subscription`] (a stream of events) and the task an
//! [`AsyncResourceEventHandler`] runs on.

use std::fmt;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::{FutureExt, Stream};
use informer_store::panic_message;

use crate::handler::{AsyncResourceEventHandler, Event};
use crate::listener::Cursor;
use crate::options::{PanicPolicy, after_panic};
use crate::registration::HandlerRegistration;

/// A stream of an informer's changes, from
/// [`subscribe`](crate::SharedIndexInformer::subscribe).
///
/// It yields the cache's state first (an [`Event::Add`] with `initial` set for every object:
/// the first list, or for a subscription made later, the objects cached at that moment), then
/// every later change in the order the cache applied it: nothing missed, nothing repeated.
/// Its buffer is bounded (see [`HandlerOptions::buffer`](crate::HandlerOptions::buffer)): a
/// subscriber that falls behind receives one event per changed key until it catches up, never
/// a stale one, and slows no one else down. Dropping it unsubscribes. It ends (`None`) when the
/// informer stops.
pub struct Subscription<K> {
    cursor: Cursor<K>,
    registration: HandlerRegistration,
}

impl<K> fmt::Debug for Subscription<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Subscription")
            .field("registration", &self.registration)
            .finish()
    }
}

impl<K> Subscription<K> {
    pub(crate) fn new(cursor: Cursor<K>, registration: HandlerRegistration) -> Self {
        Self {
            cursor,
            registration,
        }
    }

    /// This subscription's registration: its counters (buffered, coalesced, lag), and
    /// [`has_synced`](HandlerRegistration::has_synced), which turns true once this stream has
    /// yielded the whole initial state.
    pub fn registration(&self) -> &HandlerRegistration {
        &self.registration
    }

    /// Whether this stream has yielded every event of the initial state (and the informer has
    /// synced).
    pub fn has_synced(&self) -> bool {
        self.registration.has_synced()
    }

    /// A future that resolves once this stream has yielded the whole initial state (`true`),
    /// or `false` if the informer stops first. It does not borrow the stream: poll it beside
    /// the loop that reads the stream (`tokio::select!`, another task), since it only resolves
    /// as the stream is read.
    pub fn synced(&self) -> impl Future<Output = bool> + Send + 'static {
        let registration = self.registration.clone();
        async move { registration.wait_for_sync().await }
    }

    /// [`synced`](Self::synced), giving up (`false`) after `timeout`.
    pub fn synced_timeout(&self, timeout: Duration) -> impl Future<Output = bool> + Send + 'static {
        let registration = self.registration.clone();
        async move { registration.wait_for_sync_timeout(timeout).await }
    }
}

impl<K> Stream for Subscription<K> {
    type Item = Event<K>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Event<K>>> {
        let this = self.get_mut();
        match this.cursor.poll_next(cx) {
            Poll::Ready(Some((event, initials))) => {
                this.cursor.handled(initials);
                Poll::Ready(Some(event))
            }
            Poll::Ready(None) => {
                this.cursor.mark_stopped();
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<K> Unpin for Subscription<K> {}

impl<K> Drop for Subscription<K> {
    fn drop(&mut self) {
        self.cursor.unsubscribe();
    }
}

/// Runs `handler` over `cursor` until the consumer ends: one notification at a time, in order.
/// The handler is marked stopped however the task ends (done, cancelled, runtime gone).
pub(crate) async fn drive_async_handler<K>(
    mut cursor: Cursor<K>,
    handler: Arc<dyn AsyncResourceEventHandler<K>>,
    policy: PanicPolicy,
    id: u64,
    informer: Arc<str>,
) where
    K: Send + Sync + 'static,
{
    let _stopped = cursor.stop_guard();
    while let Some((event, initials)) = std::future::poll_fn(|cx| cursor.poll_next(cx)).await {
        let call = match event {
            Event::Add { key, obj, initial } => handler.on_add(key, obj, initial),
            Event::Update { key, old, new } => handler.on_update(key, old, new),
            Event::Delete {
                key,
                obj,
                final_state_unknown,
            } => handler.on_delete(key, obj, final_state_unknown),
        };
        let outcome = AssertUnwindSafe(call).catch_unwind().await;
        cursor.handled(initials);
        if let Err(panic) = outcome {
            cursor.panicked();
            if !after_panic(policy, id, &informer, panic_message(&*panic)) {
                cursor.failed();
                break;
            }
        }
    }
}
