//! What the default watch error handler logs, and at which level: WARN only for what a person
//! must act on, DEBUG for what the reflector recovers from by itself, and one WARN per outage
//! that keeps it from the server for a minute.
//!
//! Alone in its binary, and one test, on purpose: `tracing` caches each callsite's interest for
//! the whole process (see `reflector_streaming_logs.rs`).

#[path = "suite/common/mod.rs"]
mod common;

use common::*;
use informer_reflector::{
    Error, ListPage, Status, WATCH_DOWN_WARNING, WatchEvent, WatchStep, default_watch_error_handler,
};
use tracing::Level;

fn logged_by_default(r: TestReflector) -> TestReflector {
    r.with_backoff(exact_backoff())
        .with_watch_error_handler(default_watch_error_handler)
}

fn refused() -> Error {
    Error::ConnectionRefused("connection refused (os error 111)".into())
}

#[tokio::test(start_paused = true)]
async fn recovered_errors_log_at_debug_and_what_a_person_must_fix_at_warn() {
    let captured = Captured::default();
    let _guard = tracing::subscriber::set_default(captured.clone());

    let fake = Fake::new();
    let page = |rv: &str| ListPage::new(vec![obj("a", 1)], rv);
    fake.push_list(page("5"));
    // Closed at once with nothing delivered: a very short watch.
    fake.push_watch(vec![]);
    fake.push_list(page("6"));
    fake.push_watch_error(Error::Transport("connection reset by peer".into()));
    fake.push_list(page("7"));
    fake.push_watch(vec![event(WatchEvent::Error(Status::new(
        410, "Expired", "too old",
    )))]);
    fake.push_list(page("8"));
    fake.push_watch(vec![event(WatchEvent::Error(Status::new(
        403,
        "Forbidden",
        "pods is forbidden: cannot watch resource pods",
    )))]);
    fake.push_list(page("9"));
    fake.push_watch(vec![WatchStep::Hang]);
    let h = Harness::new(fake, logged_by_default).start();
    h.requests(10).await;
    h.settle().await;

    for recovered in ["very short watch", "connection reset by peer", "too old"] {
        assert_eq!(
            captured.count(Level::DEBUG, recovered),
            1,
            "{recovered}: {:#?}",
            captured.0.lock()
        );
        assert_eq!(captured.count(Level::WARN, recovered), 0, "{recovered}");
    }
    assert_eq!(captured.count(Level::WARN, "forbidden"), 1);
    assert_eq!(
        captured.count(Level::WARN, ""),
        1,
        "nothing else at WARN: {:#?}",
        captured.0.lock()
    );
    h.stop().await;

    an_outage_warns_once_after_a_minute(&captured).await;
}

/// A server refusing connections: DEBUG for each failure, one WARN once the reflector has had no
/// watch for [`WATCH_DOWN_WARNING`], none more in that outage, one more in the next.
async fn an_outage_warns_once_after_a_minute(captured: &Captured) {
    const DOWN: &str = "no watch for";
    let fake = Fake::new();
    // Refused lists past a minute: the readiness cadence (at most 2.5 s apart) for the first
    // minute, the backoff after it.
    const OUTAGE: usize = 40;
    let outage = |fake: &Fake| {
        for _ in 0..OUTAGE {
            fake.push_list_error(refused());
        }
    };
    outage(&fake);
    fake.push_list(ListPage::new(vec![obj("a", 1)], "5"));
    // A watch opens, then the server loses its history: the relists fail again.
    fake.push_watch(vec![event(WatchEvent::Error(Status::new(
        410, "Expired", "too old",
    )))]);
    outage(&fake);
    fake.push_list(ListPage::new(vec![obj("a", 1)], "6"));
    fake.push_watch(vec![WatchStep::Hang]);
    let h = Harness::new(fake, logged_by_default).start();

    // The first outage: failed lists, past a minute.
    let first = h.requests(OUTAGE).await;
    h.settle().await;
    let down = first[OUTAGE - 1].at() - h.started;
    assert!(down > WATCH_DOWN_WARNING, "{down:?}");
    assert_eq!(
        captured.count(Level::WARN, DOWN),
        1,
        "{:#?}",
        captured.0.lock()
    );
    assert_eq!(
        captured.count(Level::WARN, "refused"),
        1,
        "only the outage's line"
    );
    assert!(captured.count(Level::DEBUG, "refused") >= OUTAGE - 1);

    // A watch opened (and ended): the next outage is a new one.
    h.requests(2 * OUTAGE + 4).await;
    h.settle().await;
    assert_eq!(
        captured.count(Level::WARN, DOWN),
        2,
        "{:#?}",
        captured.0.lock()
    );
    h.stop().await;
}
