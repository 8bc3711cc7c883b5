//! A small in-memory API server that follows the list/watch protocol — live state, an event
//! history with a compaction floor, pagination, bookmarks, watch timeouts — and fails on demand.
//! It drives the convergence tests: whatever faults it injects, the reflector's store must end up
//! equal to its state.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use informer_reflector::{
    Error, ListPage, ListParams, ListerWatcher, Status, WatchEvent, WatchParams, WatchStream,
};
use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::{Obj, obj};

/// A failure injected into the next request of its kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// The next list (first page) fails with this HTTP status.
    List(u16),
    /// The next continuation page fails with this HTTP status (410: the token expired).
    Page(u16),
    /// The next watch is refused with this HTTP status before the stream starts.
    WatchRefused(u16),
    /// The next watch's connection is refused.
    ConnectionRefused,
    /// The next watch delivers `n` events, then an ERROR event with this code.
    ErrorEvent(usize, u16),
    /// The next watch delivers `n` events, then breaks (a transport error).
    Break(usize),
    /// The next watch delivers `n` events, then ends cleanly.
    Close(usize),
}

impl Fault {
    fn is_list(&self) -> bool {
        matches!(self, Self::List(_) | Self::Page(_))
    }
}

fn status(code: u16) -> Status {
    match code {
        410 => Status::expired("too old resource version"),
        504 => Status::too_large_resource_version(),
        429 => Status::too_many_requests(Some(Duration::from_secs(1))),
        500 => Status::internal_error("boom"),
        code => Status::new(code, "", "injected"),
    }
}

#[derive(Clone)]
struct Change {
    rv: u64,
    kind: ChangeKind,
    object: Arc<Obj>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum ChangeKind {
    Added,
    Modified,
    Deleted,
}

struct State {
    objects: BTreeMap<String, (Arc<Obj>, u64)>,
    head: u64,
    history: Vec<Change>,
    /// Watches from a version below this get 410.
    floor: u64,
    /// Bumped when the server closes every watch (a cache re-initialisation).
    epoch: u64,
    faults: VecDeque<Fault>,
    snapshots: HashMap<u64, (Vec<Arc<Obj>>, u64)>,
    next_snapshot: u64,
    /// `(kind, resource_version, at)` of every request; kind is `list`, `page` (a continuation)
    /// or `watch`.
    requests: Vec<(&'static str, String, Instant)>,
}

/// The in-memory server. Share it as `Arc<ModelServer>`.
#[allow(missing_debug_implementations, reason = "a test fixture")]
pub struct ModelServer {
    state: Mutex<State>,
    changed: Notify,
    /// Send a bookmark this long before a watch's timeout.
    bookmarks_before_timeout: Duration,
}

impl ModelServer {
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(State {
                objects: BTreeMap::new(),
                head: 1,
                history: Vec::new(),
                floor: 1,
                epoch: 0,
                faults: VecDeque::new(),
                snapshots: HashMap::new(),
                next_snapshot: 0,
                requests: Vec::new(),
            }),
            changed: Notify::new(),
            bookmarks_before_timeout: Duration::from_secs(2),
        })
    }

    /// Creates or updates `name`; its generation becomes the new resource version.
    pub fn put(&self, name: &str) {
        let mut s = self.state.lock();
        s.head += 1;
        let rv = s.head;
        let object = obj(name, u32::try_from(rv).unwrap());
        let kind = if s.objects.contains_key(name) {
            ChangeKind::Modified
        } else {
            ChangeKind::Added
        };
        s.objects.insert(name.to_owned(), (object.clone(), rv));
        s.history.push(Change { rv, kind, object });
        drop(s);
        self.changed.notify_waiters();
    }

    /// Deletes `name` if it exists.
    pub fn delete(&self, name: &str) {
        let mut s = self.state.lock();
        let Some((last, _)) = s.objects.remove(name) else {
            return;
        };
        s.head += 1;
        let rv = s.head;
        s.history.push(Change {
            rv,
            kind: ChangeKind::Deleted,
            object: last,
        });
        drop(s);
        self.changed.notify_waiters();
    }

    /// Drops the event history and closes every watch (the watch cache re-initialised): any
    /// watch from an older version now gets 410.
    pub fn reset_history(&self) {
        let mut s = self.state.lock();
        s.floor = s.head;
        s.history.clear();
        s.epoch += 1;
        drop(s);
        self.changed.notify_waiters();
    }

    pub fn inject(&self, fault: Fault) {
        self.state.lock().faults.push_back(fault);
    }

    pub fn clear_faults(&self) {
        self.state.lock().faults.clear();
    }

    /// The state as sorted `(name, generation)` pairs.
    pub fn content(&self) -> Vec<(String, u32)> {
        self.state
            .lock()
            .objects
            .values()
            .map(|(o, _)| (o.name.clone(), o.generation))
            .collect()
    }

    pub fn head(&self) -> u64 {
        self.state.lock().head
    }

    /// `(kind, resource_version, at)` of every request so far (kind: `list`, `page`, `watch`).
    pub fn requests(&self) -> Vec<(&'static str, String, Instant)> {
        self.state.lock().requests.clone()
    }

    fn take_fault(s: &mut State, matches: impl Fn(&Fault) -> bool) -> Option<Fault> {
        let pos = s.faults.iter().position(matches)?;
        s.faults.remove(pos)
    }

    fn do_list(&self, params: &ListParams) -> Result<ListPage<Obj>, Error> {
        let mut s = self.state.lock();
        let kind = if params.continue_token.is_some() {
            "page"
        } else {
            "list"
        };
        s.requests
            .push((kind, params.resource_version.clone(), Instant::now()));
        let continuing = params.continue_token.is_some();
        let fault = Self::take_fault(&mut s, |f| match f {
            Fault::List(_) => !continuing,
            Fault::Page(_) => continuing,
            _ => false,
        });
        if let Some(Fault::List(code) | Fault::Page(code)) = fault {
            return Err(Error::Api(status(code)));
        }
        let (items, rv, start) = match &params.continue_token {
            Some(token) => {
                let (id, offset) = token.split_once(':').expect("our own token");
                let (id, offset): (u64, usize) = (id.parse().unwrap(), offset.parse().unwrap());
                let Some((items, rv)) = s.snapshots.get(&id).cloned() else {
                    return Err(Error::Api(Status::expired("continue token too old")));
                };
                (items, rv, offset)
            }
            None => {
                if let Ok(n) = params.resource_version.parse::<u64>()
                    && n > s.head
                {
                    return Err(Error::Api(status(504)));
                }
                let items: Vec<_> = s.objects.values().map(|(o, _)| o.clone()).collect();
                let rv = s.head;
                // Like the watch cache: a list at "0" ignores the limit.
                if params.resource_version == "0" {
                    return Ok(ListPage::new(items, rv.to_string()));
                }
                (items, rv, 0)
            }
        };
        let limit = params.limit.map_or(usize::MAX, |l| l as usize);
        let end = start.saturating_add(limit).min(items.len());
        let mut page = ListPage::new(items[start..end].to_vec(), rv.to_string());
        if end < items.len() {
            let id = s.next_snapshot;
            s.next_snapshot += 1;
            s.snapshots.insert(id, (items, rv));
            page = page.with_continue(format!("{id}:{end}"));
        }
        Ok(page)
    }

    fn do_watch(self: &Arc<Self>, params: &WatchParams) -> Result<WatchStream<Obj>, Error> {
        let mut s = self.state.lock();
        s.requests
            .push(("watch", params.resource_version.clone(), Instant::now()));
        let fault = Self::take_fault(&mut s, |f| !f.is_list());
        match fault {
            Some(Fault::WatchRefused(code)) => return Err(Error::Api(status(code))),
            Some(Fault::ConnectionRefused) => {
                return Err(Error::ConnectionRefused("refused".into()));
            }
            _ => {}
        }
        let deadline = Instant::now() + params.timeout.unwrap_or(Duration::from_secs(60));
        let mut queued: VecDeque<Result<WatchEvent<Obj>, Error>> = VecDeque::new();
        let cursor = match params.resource_version.as_str() {
            "" | "0" => {
                for (o, rv) in s.objects.values() {
                    queued.push_back(Ok(WatchEvent::added(o.clone(), rv.to_string())));
                }
                s.head
            }
            rv => {
                let n: u64 = rv.parse().expect("a version we handed out");
                if n < s.floor {
                    queued.push_back(Ok(WatchEvent::Error(status(410))));
                    u64::MAX
                } else {
                    n
                }
            }
        };
        let stream = WatchState {
            server: self.clone(),
            cursor,
            epoch: s.epoch,
            deadline,
            queued,
            sent: 0,
            fault,
            bookmarks: params.allow_bookmarks,
            done: false,
        };
        drop(s);
        Ok(futures::stream::unfold(stream, WatchState::next).boxed())
    }
}

struct WatchState {
    server: Arc<ModelServer>,
    cursor: u64,
    epoch: u64,
    deadline: Instant,
    queued: VecDeque<Result<WatchEvent<Obj>, Error>>,
    sent: usize,
    fault: Option<Fault>,
    bookmarks: bool,
    done: bool,
}

impl WatchState {
    async fn next(mut self) -> Option<(Result<WatchEvent<Obj>, Error>, Self)> {
        loop {
            if self.done {
                return None;
            }
            match self.fault {
                Some(Fault::ErrorEvent(n, code)) if self.sent >= n => {
                    self.done = true;
                    return Some((Ok(WatchEvent::Error(status(code))), self));
                }
                Some(Fault::Break(n)) if self.sent >= n => {
                    self.done = true;
                    return Some((Err(Error::Transport("connection reset".into())), self));
                }
                Some(Fault::Close(n)) if self.sent >= n => return None,
                _ => {}
            }
            if let Some(event) = self.queued.pop_front() {
                if matches!(event, Ok(WatchEvent::Error(_))) {
                    self.done = true;
                } else {
                    self.sent += 1;
                }
                return Some((event, self));
            }
            let server = self.server.clone();
            let changed = server.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            {
                let s = server.state.lock();
                if s.epoch != self.epoch {
                    return None;
                }
                let from = s.history.partition_point(|c| c.rv <= self.cursor);
                for change in &s.history[from..] {
                    let rv = change.rv.to_string();
                    let object = change.object.clone();
                    self.queued.push_back(Ok(match change.kind {
                        ChangeKind::Added => WatchEvent::added(object, rv),
                        ChangeKind::Modified => WatchEvent::modified(object, rv),
                        ChangeKind::Deleted => WatchEvent::deleted(object, rv),
                    }));
                    self.cursor = change.rv;
                }
                if !self.queued.is_empty() {
                    continue;
                }
            }
            let bookmark_at = self.deadline - server.bookmarks_before_timeout;
            tokio::select! {
                () = changed => {}
                () = tokio::time::sleep_until(bookmark_at), if self.bookmarks && Instant::now() < bookmark_at => {
                    // Everything up to the cursor has been sent; a change that raced this timer
                    // is picked up by the next turn.
                    self.sent += 1;
                    let rv = self.cursor.to_string();
                    return Some((Ok(WatchEvent::bookmark(rv)), self));
                }
                () = tokio::time::sleep_until(self.deadline) => return None,
            }
        }
    }
}

impl ListerWatcher<Obj> for Arc<ModelServer> {
    fn list(
        &self,
        params: &ListParams,
    ) -> impl Future<Output = Result<ListPage<Obj>, Error>> + Send {
        let result = self.do_list(params);
        async move { result }
    }

    fn watch(
        &self,
        params: &WatchParams,
    ) -> impl Future<Output = Result<WatchStream<Obj>, Error>> + Send {
        let result = self.do_watch(params);
        async move { result }
    }
}
