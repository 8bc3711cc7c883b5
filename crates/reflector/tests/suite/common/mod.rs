//! Shared test fixtures: a tiny object type, a store that records the reflector's writes, and a
//! harness that runs a reflector against a scripted fake on tokio's paused clock.

#![allow(
    dead_code,
    unreachable_pub,
    reason = "each test file uses a subset of the fixtures"
)]

pub mod model_server;

use std::sync::Arc;
use std::task::Waker;
use std::time::Duration;

use informer_reflector::{
    BackoffConfig, Error, FakeListerWatcher, Reflector, Request, WatchEvent, WatchStep,
};
use informer_store::{
    KnownObjects, ReflectorStore, ReplaceParts, Result as StoreResult, Store, ThreadSafeStore,
    key_func, meta_namespace_key,
};
use parking_lot::Mutex;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// A test object: a name (its key) and a generation to tell versions apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Obj {
    pub name: String,
    pub generation: u32,
}

pub fn obj(name: &str, generation: u32) -> Arc<Obj> {
    Arc::new(Obj {
        name: name.to_owned(),
        generation,
    })
}

/// One write the reflector made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    Add(String),
    Update(String),
    Delete(String),
    Replace(Vec<String>, String),
    /// A part of a list applied page by page (names sorted).
    Part(Vec<String>),
    /// The end of a list applied page by page: the keys deleted, the resource version.
    PartsDone(Vec<String>, String),
    Resync,
    Bookmark(String),
}

/// A [`ThreadSafeStore`] that also logs every write and can be told to fail resyncs.
pub struct RecordingStore {
    pub inner: ThreadSafeStore<Obj>,
    pub ops: Mutex<Vec<(Op, Instant)>>,
    pub fail_resync: Mutex<bool>,
    /// What `backlog` answers: `None`, a store's answer, unless a test makes it a queue's.
    pub backlog: Mutex<Option<usize>>,
    /// The waker a waiting reflector left with `backlog_waking`, woken by `catch_up`.
    backlog_waker: Mutex<Option<Waker>>,
}

impl RecordingStore {
    pub fn new() -> Self {
        Self {
            inner: ThreadSafeStore::new(key_func(|o: &Obj| meta_namespace_key(None, &o.name))),
            ops: Mutex::new(Vec::new()),
            fail_resync: Mutex::new(false),
            backlog: Mutex::new(None),
            backlog_waker: Mutex::new(None),
        }
    }

    /// Sets the backlog to `queued` and wakes the reflector waiting on it, as a queue's pop
    /// does.
    pub fn catch_up(&self, queued: usize) {
        *self.backlog.lock() = Some(queued);
        if let Some(waker) = self.backlog_waker.lock().take() {
            waker.wake();
        }
    }

    fn log(&self, op: Op) {
        self.ops.lock().push((op, Instant::now()));
    }

    pub fn ops(&self) -> Vec<Op> {
        self.ops.lock().iter().map(|(op, _)| op.clone()).collect()
    }

    pub fn op_times(&self, want: impl Fn(&Op) -> bool) -> Vec<Instant> {
        self.ops
            .lock()
            .iter()
            .filter(|(op, _)| want(op))
            .map(|(_, at)| *at)
            .collect()
    }

    /// The store's content as sorted `(name, generation)` pairs.
    pub fn content(&self) -> Vec<(String, u32)> {
        let mut all: Vec<_> = self
            .inner
            .list()
            .iter()
            .map(|o| (o.name.clone(), o.generation))
            .collect();
        all.sort();
        all
    }
}

impl ReflectorStore<Obj> for RecordingStore {
    type Error = informer_store::Error;

    fn add(&self, obj: Arc<Obj>) -> StoreResult<()> {
        self.log(Op::Add(obj.name.clone()));
        self.inner.add(obj)
    }
    fn update(&self, obj: Arc<Obj>) -> StoreResult<()> {
        self.log(Op::Update(obj.name.clone()));
        self.inner.update(obj)
    }
    fn delete(&self, obj: Arc<Obj>) -> StoreResult<()> {
        self.log(Op::Delete(obj.name.clone()));
        self.inner.delete(obj)
    }
    fn replace(&self, list: Vec<Arc<Obj>>, resource_version: String) -> StoreResult<()> {
        let mut names: Vec<_> = list.iter().map(|o| o.name.clone()).collect();
        names.sort();
        self.log(Op::Replace(names, resource_version.clone()));
        self.inner.replace(list, resource_version)
    }
    /// Applies each part at once (as a populated queue does), so a test sees what a list
    /// applied page by page leaves behind.
    fn replace_part(&self, part: Vec<Arc<Obj>>, parts: &mut ReplaceParts<Obj>) -> StoreResult<()> {
        parts.decide(true);
        let mut names: Vec<_> = part.iter().map(|o| o.name.clone()).collect();
        names.sort();
        self.log(Op::Part(names));
        for obj in part {
            parts.note_listed(&obj.name);
            self.inner.update(obj)?;
        }
        Ok(())
    }
    fn replace_parts_done(
        &self,
        parts: ReplaceParts<Obj>,
        resource_version: String,
    ) -> StoreResult<()> {
        let mut deleted: Vec<_> = self
            .inner
            .list_keys()
            .into_iter()
            .filter(|key| !parts.is_listed(key))
            .collect();
        deleted.sort();
        for key in &deleted {
            self.inner.delete_by_key(key)?;
        }
        self.log(Op::PartsDone(deleted, resource_version.clone()));
        self.inner.bookmark(&resource_version)
    }
    fn backlog(&self) -> Option<usize> {
        *self.backlog.lock()
    }
    fn backlog_waking(&self, bound: usize, waker: &Waker) -> Option<usize> {
        let backlog = *self.backlog.lock();
        if backlog.is_some_and(|queued| queued > bound) {
            *self.backlog_waker.lock() = Some(waker.clone());
        }
        backlog
    }
    fn resync(&self) -> StoreResult<()> {
        self.log(Op::Resync);
        if *self.fail_resync.lock() {
            return Err(informer_store::KeyError::Other("resync refused".into()).into());
        }
        Ok(())
    }
    fn bookmark(&self, resource_version: &str) -> StoreResult<()> {
        self.log(Op::Bookmark(resource_version.to_owned()));
        self.inner.bookmark(resource_version)
    }
}

impl KnownObjects<Obj> for RecordingStore {
    fn list_keys(&self) -> Vec<String> {
        self.inner.list_keys()
    }
    fn get_by_key(&self, key: &str) -> Option<Arc<Obj>> {
        self.inner.get_by_key(key)
    }
}

pub type Fake = FakeListerWatcher<Obj>;
pub type TestReflector = Reflector<Obj, Arc<Fake>, Arc<RecordingStore>>;

/// A reflector running in a task, with its fake server, its store and the errors its watch error
/// handler saw.
pub struct Harness {
    pub fake: Arc<Fake>,
    pub store: Arc<RecordingStore>,
    pub reflector: Arc<TestReflector>,
    pub errors: Arc<Mutex<Vec<String>>>,
    pub stop: CancellationToken,
    pub task: Option<JoinHandle<()>>,
    pub started: Instant,
}

impl Harness {
    /// A reflector over `fake` (serving streaming lists where the reflector asks for them) with
    /// a fixed seed, configured further by `configure`.
    pub fn new(fake: Fake, configure: impl FnOnce(TestReflector) -> TestReflector) -> Self {
        Self::over(fake.supporting_streaming_lists(), configure)
    }

    /// [`new`](Self::new) over `fake` as it is.
    pub fn over(fake: Fake, configure: impl FnOnce(TestReflector) -> TestReflector) -> Self {
        let fake = Arc::new(fake);
        let store = Arc::new(RecordingStore::new());
        let errors = Arc::new(Mutex::new(Vec::new()));
        let seen = errors.clone();
        let reflector = Reflector::new(fake.clone(), store.clone())
            .with_seed(7)
            .with_watch_error_handler(move |e: &Error| seen.lock().push(describe(e)));
        let reflector = Arc::new(configure(reflector));
        Self {
            fake,
            store,
            reflector,
            errors,
            stop: CancellationToken::new(),
            task: None,
            started: Instant::now(),
        }
    }

    pub fn start(mut self) -> Self {
        let (reflector, stop) = (self.reflector.clone(), self.stop.clone());
        self.started = Instant::now();
        self.task = Some(tokio::spawn(async move { reflector.run(stop).await }));
        self
    }

    /// Waits (on virtual time, at most an hour of it) until `n` requests have arrived.
    pub async fn requests(&self, n: usize) -> Vec<Request> {
        match tokio::time::timeout(Duration::from_secs(3600), self.fake.wait_for_requests(n)).await
        {
            Ok(requests) => requests,
            Err(_) => panic!(
                "expected {n} requests, got {:#?}\nerrors: {:?}",
                self.fake.requests(),
                self.errors.lock()
            ),
        }
    }

    /// Lets the reflector task run until `cond` holds (without moving the clock).
    pub async fn until(&self, what: &str, cond: impl Fn(&Self) -> bool) {
        for _ in 0..10_000 {
            if cond(self) {
                return;
            }
            tokio::task::yield_now().await;
        }
        panic!("condition never held: {what}; ops: {:?}", self.store.ops());
    }

    /// Lets the reflector task run until `cond` holds, moving the clock a millisecond at a
    /// time (at most an hour of it): for a condition behind a timer (a wait that polls).
    pub async fn until_in_time(&self, what: &str, cond: impl Fn(&Self) -> bool) {
        for _ in 0..3_600_000 {
            if cond(self) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        panic!(
            "condition never held within an hour: {what}; ops: {:?}",
            self.store.ops()
        );
    }

    /// Lets every ready task run, without moving the clock.
    pub async fn settle(&self) {
        for _ in 0..1_000 {
            tokio::task::yield_now().await;
        }
    }

    pub async fn stop(mut self) {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            tokio::time::timeout(Duration::from_secs(1), task)
                .await
                .expect("the reflector stops promptly")
                .expect("the reflector task does not panic");
        }
    }

    pub fn last_rv(&self) -> String {
        self.reflector.last_sync_resource_version()
    }
}

/// A short description of an error, for assertions.
pub fn describe(e: &Error) -> String {
    match e.status() {
        Some(status) => format!("{:?} {}", e.kind(), status.code),
        None => format!("{:?} {e}", e.kind()),
    }
}

/// Backoff without jitter, for exact timing checks.
pub fn exact_backoff() -> BackoffConfig {
    BackoffConfig {
        jitter: 0.0,
        ..BackoffConfig::default()
    }
}

pub fn event(e: WatchEvent<Obj>) -> WatchStep<Obj> {
    WatchStep::Event(e)
}

pub fn added(name: &str, generation: u32, rv: &str) -> WatchStep<Obj> {
    event(WatchEvent::added(obj(name, generation), rv))
}

pub fn modified(name: &str, generation: u32, rv: &str) -> WatchStep<Obj> {
    event(WatchEvent::modified(obj(name, generation), rv))
}

pub fn deleted(name: &str, generation: u32, rv: &str) -> WatchStep<Obj> {
    event(WatchEvent::deleted(obj(name, generation), rv))
}

pub fn bookmark(rv: &str) -> WatchStep<Obj> {
    event(WatchEvent::bookmark(rv))
}

/// Seconds between two instants.
pub fn gap(a: Instant, b: Instant) -> f64 {
    b.duration_since(a).as_secs_f64()
}

/// A request as `kind@resource_version`, e.g. `list@0`, `watch@10`, `list@""`.
pub fn shape(request: &Request) -> String {
    let kind = if request.is_list() { "list" } else { "watch" };
    match request.resource_version() {
        "" => format!(r#"{kind}@"""#),
        rv => format!("{kind}@{rv}"),
    }
}

/// The shapes of all requests, space-separated: the request timeline in one line.
pub fn shapes(requests: &[Request]) -> String {
    requests.iter().map(shape).collect::<Vec<_>>().join(" ")
}

/// A `tracing` subscriber that keeps every event's level and fields, as text.
#[derive(Clone, Default)]
pub struct Captured(pub Arc<parking_lot::Mutex<Vec<(tracing::Level, String)>>>);

impl tracing::Subscriber for Captured {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        struct Text(String);
        impl tracing::field::Visit for Text {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                self.0.push_str(&format!("{}={value:?} ", field.name()));
            }
        }
        let mut text = Text(String::new());
        event.record(&mut text);
        self.0.lock().push((*event.metadata().level(), text.0));
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

impl Captured {
    /// The events at `level` whose text contains `needle`.
    pub fn count(&self, level: tracing::Level, needle: &str) -> usize {
        self.0
            .lock()
            .iter()
            .filter(|(l, text)| *l == level && text.contains(needle))
            .count()
    }
}
