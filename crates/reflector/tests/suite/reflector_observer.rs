//! The observer hooks: each list with its reason and outcome, each watch start and end, every
//! event by type, resourceVersion moves, backoff waits and 429s, in the order they happen.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use informer_reflector::{
    Error, ErrorKind, EventType, ListOutcome, ListPage, ListReason, ReflectorObserver, Status,
    WatchEnd, WatchEvent, WatchStep,
};
use parking_lot::Mutex;

#[derive(Debug, Clone, PartialEq)]
enum Seen {
    List(ListReason, bool, Result<usize, ErrorKind>),
    WatchStarted,
    WatchEnded(WatchEnd),
    Event(EventType),
    SyncedTo(String),
    Backoff,
    Throttled,
}

#[derive(Default)]
struct Recorder(Mutex<Vec<Seen>>);

impl ReflectorObserver for Recorder {
    fn list(&self, outcome: ListOutcome) {
        self.0.lock().push(Seen::List(
            outcome.reason,
            outcome.streaming,
            outcome.result,
        ));
    }
    fn watch_started(&self) {
        self.0.lock().push(Seen::WatchStarted);
    }
    fn watch_ended(&self, end: WatchEnd) {
        self.0.lock().push(Seen::WatchEnded(end));
    }
    fn event(&self, event: EventType) {
        self.0.lock().push(Seen::Event(event));
    }
    fn synced_to(&self, resource_version: &str) {
        self.0.lock().push(Seen::SyncedTo(resource_version.into()));
    }
    fn backoff(&self, _delay: Duration) {
        self.0.lock().push(Seen::Backoff);
    }
    fn throttled(&self) {
        self.0.lock().push(Seen::Throttled);
    }
}

#[tokio::test(start_paused = true)]
async fn every_list_watch_event_and_wait_is_reported() {
    let fake = Fake::new();
    fake.push_list(ListPage::new(vec![obj("a", 1), obj("b", 1)], "10"));
    fake.push_watch(vec![
        added("c", 1, "11"),
        modified("a", 2, "12"),
        bookmark("13"),
        event(WatchEvent::Error(Status::expired("too old"))),
    ]);
    // The relist after the 410, then a watch refused with 429, then one that hangs.
    fake.push_list(ListPage::new(vec![obj("a", 2)], "20"));
    fake.push_watch_error(Error::Api(Status::too_many_requests(Some(
        Duration::from_secs(1),
    ))));
    fake.push_watch(vec![WatchStep::Hang]);
    let recorder = Arc::new(Recorder::default());
    let h = Harness::new(fake, {
        let recorder = Arc::clone(&recorder);
        move |r| r.with_observer(recorder)
    })
    .start();
    h.requests(5).await;
    h.settle().await;
    use Seen::*;
    assert_eq!(
        *recorder.0.lock(),
        [
            List(ListReason::Initial, false, Ok(2)),
            SyncedTo("10".into()),
            WatchStarted,
            Event(EventType::Added),
            SyncedTo("11".into()),
            Event(EventType::Modified),
            SyncedTo("12".into()),
            Event(EventType::Bookmark),
            SyncedTo("13".into()),
            Event(EventType::Error),
            WatchEnded(WatchEnd::Error(ErrorKind::Expired)),
            // The relist after a 410 is sent at once: no wait.
            List(ListReason::Expired, false, Ok(1)),
            SyncedTo("20".into()),
            Throttled,
            Backoff,
            WatchStarted,
        ]
    );
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn failed_lists_report_their_error_and_the_retry_its_reason() {
    let fake = Fake::new();
    fake.push_list_error(Error::Api(Status::internal_error("boom")));
    fake.push_list(ListPage::new(vec![], "5"));
    fake.push_watch(vec![WatchStep::Hang]);
    let recorder = Arc::new(Recorder::default());
    let h = Harness::new(fake, {
        let recorder = Arc::clone(&recorder);
        move |r| r.with_observer(recorder)
    })
    .start();
    h.requests(3).await;
    h.settle().await;
    let lists: Vec<_> = recorder
        .0
        .lock()
        .iter()
        .filter(|s| matches!(s, Seen::List(..)))
        .cloned()
        .collect();
    assert_eq!(
        lists,
        [
            Seen::List(ListReason::Initial, false, Err(ErrorKind::InternalError)),
            Seen::List(ListReason::Error, false, Ok(0)),
        ]
    );
    h.stop().await;
}
