//! [`FakeListerWatcher`]: an in-memory, scriptable [`ListerWatcher`] for tests.

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::time::Duration;

use futures::StreamExt;
use futures::stream;
use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::error::Error;
use crate::lister_watcher::{
    ListPage, ListParams, ListerWatcher, WatchEvent, WatchParams, WatchStream,
};

/// One step of a scripted watch stream.
pub enum WatchStep<K> {
    /// Deliver this event.
    Event(WatchEvent<K>),
    /// Fail the stream with this error (the reflector stops reading after it).
    Fail(Error),
    /// Wait this long (on tokio's clock) before the next step.
    Wait(Duration),
    /// Stay open, delivering nothing, until the reader drops the stream.
    Hang,
}

impl<K> fmt::Debug for WatchStep<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Event(e) => f.debug_tuple("Event").field(e).finish(),
            Self::Fail(e) => f.debug_tuple("Fail").field(e).finish(),
            Self::Wait(d) => f.debug_tuple("Wait").field(d).finish(),
            Self::Hang => f.write_str("Hang"),
        }
    }
}

/// A request the fake received, with the (tokio) time it arrived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// A list request.
    List {
        /// Its parameters.
        params: ListParams,
        /// When it arrived.
        at: Instant,
    },
    /// A watch request.
    Watch {
        /// Its parameters.
        params: WatchParams,
        /// When it arrived.
        at: Instant,
    },
}

impl Request {
    /// When the request arrived.
    pub fn at(&self) -> Instant {
        match self {
            Self::List { at, .. } | Self::Watch { at, .. } => *at,
        }
    }

    /// Whether it is a list request.
    pub fn is_list(&self) -> bool {
        matches!(self, Self::List { .. })
    }

    /// The requested resource version.
    pub fn resource_version(&self) -> &str {
        match self {
            Self::List { params, .. } => &params.resource_version,
            Self::Watch { params, .. } => &params.resource_version,
        }
    }
}

enum WatchScript<K> {
    Refuse(Error),
    Stream(Vec<WatchStep<K>>),
}

struct Script<K> {
    lists: VecDeque<Result<ListPage<K>, Error>>,
    watches: VecDeque<WatchScript<K>>,
    requests: Vec<Request>,
}

/// A [`ListerWatcher`] that answers from a script: queued list responses and queued watch
/// streams, consumed one per request in order. It records every request with its arrival time,
/// so tests can check what the reflector asked for and when.
///
/// When its script runs out, a request never completes (as if the server hung); on tokio's
/// paused clock that lets time run on to the reflector's next timer.
///
/// ```
/// use std::sync::Arc;
/// use informer_reflector::{FakeListerWatcher, ListPage, ListParams, ListerWatcher};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let fake = FakeListerWatcher::new();
/// fake.push_list(ListPage::new(vec![Arc::new(1_u32)], "10"));
/// let page = fake.list(&ListParams::default()).await.unwrap();
/// assert_eq!(page.resource_version, "10");
/// assert_eq!(fake.requests().len(), 1);
/// # }
/// ```
pub struct FakeListerWatcher<K> {
    script: Mutex<Script<K>>,
    arrived: Notify,
    streaming: bool,
}

impl<K> fmt::Debug for FakeListerWatcher<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let script = self.script.lock();
        f.debug_struct("FakeListerWatcher")
            .field("queued_lists", &script.lists.len())
            .field("queued_watches", &script.watches.len())
            .field("requests", &script.requests.len())
            .finish()
    }
}

impl<K> Default for FakeListerWatcher<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K> FakeListerWatcher<K> {
    /// A fake with an empty script.
    pub fn new() -> Self {
        Self {
            script: Mutex::new(Script {
                lists: VecDeque::new(),
                watches: VecDeque::new(),
                requests: Vec::new(),
            }),
            arrived: Notify::new(),
            streaming: false,
        }
    }

    /// The same fake, saying it serves streaming lists
    /// ([`ListerWatcher::supports_streaming_list`]): a reflector asked for them then opens its
    /// first watch with `send_initial_events`, and the script must answer it with the initial
    /// events and their end bookmark. Without it (as client-go's fake clients) a reflector
    /// lists and watches whatever it was asked for.
    pub fn supporting_streaming_lists(mut self) -> Self {
        self.streaming = true;
        self
    }

    /// Queues a successful list response.
    pub fn push_list(&self, page: ListPage<K>) -> &Self {
        self.script.lock().lists.push_back(Ok(page));
        self
    }

    /// Queues a failed list response.
    pub fn push_list_error(&self, error: Error) -> &Self {
        self.script.lock().lists.push_back(Err(error));
        self
    }

    /// Queues a watch that the server accepts and that runs `steps`, then closes cleanly (unless
    /// a step fails it or hangs).
    pub fn push_watch(&self, steps: Vec<WatchStep<K>>) -> &Self {
        self.script
            .lock()
            .watches
            .push_back(WatchScript::Stream(steps));
        self
    }

    /// Queues a watch that the server refuses with `error` (an HTTP error before the stream).
    pub fn push_watch_error(&self, error: Error) -> &Self {
        self.script
            .lock()
            .watches
            .push_back(WatchScript::Refuse(error));
        self
    }

    /// Every request so far, in arrival order.
    pub fn requests(&self) -> Vec<Request> {
        self.script.lock().requests.clone()
    }

    /// The number of scripted responses not yet consumed: `(lists, watches)`.
    pub fn pending(&self) -> (usize, usize) {
        let script = self.script.lock();
        (script.lists.len(), script.watches.len())
    }

    /// Waits until at least `n` requests have arrived, and returns them all.
    pub async fn wait_for_requests(&self, n: usize) -> Vec<Request> {
        loop {
            let arrived = self.arrived.notified();
            tokio::pin!(arrived);
            arrived.as_mut().enable();
            {
                let script = self.script.lock();
                if script.requests.len() >= n {
                    return script.requests.clone();
                }
            }
            arrived.await;
        }
    }

    fn record(&self, request: Request) {
        self.script.lock().requests.push(request);
        self.arrived.notify_waiters();
    }
}

impl<K: Send + Sync + 'static> ListerWatcher<K> for FakeListerWatcher<K> {
    fn list(&self, params: &ListParams) -> impl Future<Output = Result<ListPage<K>, Error>> + Send {
        self.record(Request::List {
            params: params.clone(),
            at: Instant::now(),
        });
        let next = self.script.lock().lists.pop_front();
        async move {
            match next {
                Some(result) => result,
                None => std::future::pending().await,
            }
        }
    }

    fn watch(
        &self,
        params: &WatchParams,
    ) -> impl Future<Output = Result<WatchStream<K>, Error>> + Send {
        self.record(Request::Watch {
            params: params.clone(),
            at: Instant::now(),
        });
        let next = self.script.lock().watches.pop_front();
        async move {
            match next {
                Some(WatchScript::Refuse(error)) => Err(error),
                Some(WatchScript::Stream(steps)) => Ok(scripted_stream(steps)),
                None => std::future::pending().await,
            }
        }
    }

    fn supports_streaming_list(&self) -> bool {
        self.streaming
    }
}

fn scripted_stream<K: Send + Sync + 'static>(steps: Vec<WatchStep<K>>) -> WatchStream<K> {
    stream::unfold(steps.into_iter(), |mut steps| async move {
        loop {
            match steps.next()? {
                WatchStep::Event(event) => return Some((Ok(event), steps)),
                WatchStep::Fail(error) => return Some((Err(error), steps)),
                WatchStep::Wait(delay) => tokio::time::sleep(delay).await,
                WatchStep::Hang => std::future::pending::<()>().await,
            }
        }
    })
    .boxed()
}
