//! The optional streaming initial list (`sendInitialEvents=true`) and its fallback to a list.

use crate::common;

use std::time::Duration;

use common::*;
use informer_reflector::{
    Error, ListPage, Request, ResourceVersionMatch, Status, WatchEvent, WatchParams, WatchStep,
};
use informer_store::{key_func, meta_namespace_key};

fn streaming(r: TestReflector) -> TestReflector {
    r.with_streaming_list(key_func(|o: &Obj| meta_namespace_key(None, &o.name)))
}

fn watch_params(r: &Request) -> &WatchParams {
    match r {
        Request::Watch { params, .. } => params,
        other => panic!("expected a watch, got {other:?}"),
    }
}

fn end(rv: &str) -> WatchStep<Obj> {
    event(WatchEvent::initial_events_end(rv))
}

#[tokio::test(start_paused = true)]
async fn the_initial_state_is_streamed_then_the_same_stream_goes_on_as_the_watch() {
    let fake = Fake::new();
    fake.push_watch(vec![
        added("b", 1, "7"),
        added("a", 1, "9"),
        added("x", 1, "3"),
        deleted("x", 1, "3"),
        bookmark("9"),
        end("12"),
        modified("a", 2, "13"),
        WatchStep::Hang,
    ]);
    let h = Harness::new(fake, streaming).start();
    h.requests(1).await;
    h.until("the live event is applied", |h| h.last_rv() == "13")
        .await;

    let requests = h.fake.requests();
    assert_eq!(requests.len(), 1, "no list and no second watch");
    let params = watch_params(&requests[0]);
    assert!(params.send_initial_events);
    assert!(params.allow_bookmarks);
    assert_eq!(params.resource_version, "");
    assert_eq!(
        params.resource_version_match,
        Some(ResourceVersionMatch::NotOlderThan)
    );
    assert_eq!(
        h.store.ops(),
        [
            Op::Part(vec!["a".into(), "b".into()]),
            Op::PartsDone(vec![], "12".into()),
            Op::Update("a".into()),
        ]
    );
    assert_eq!(h.store.content(), [("a".into(), 2), ("b".into(), 1)]);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_refused_streaming_list_falls_back_to_list_and_watch() {
    let fake = Fake::new();
    fake.push_watch_error(Error::Api(Status::new(
        422,
        "Invalid",
        "sendInitialEvents is forbidden",
    )));
    fake.push_list(ListPage::new(vec![obj("a", 1)], "5"));
    fake.push_watch(vec![WatchStep::Hang]);
    let h = Harness::new(fake, streaming).start();
    let requests = h.requests(3).await;
    assert_eq!(shapes(&requests), r#"watch@"" list@0 watch@5"#);
    assert!(!watch_params(&requests[2]).send_initial_events);
    assert_eq!(
        requests[1].at(),
        requests[0].at(),
        "the fallback is immediate"
    );
    assert_eq!(h.store.content(), [("a".into(), 1)]);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_stream_that_ends_before_its_end_bookmark_is_discarded_and_retried() {
    let fake = Fake::new();
    fake.push_watch(vec![added("partial", 1, "3")]);
    fake.push_watch(vec![added("a", 1, "4"), end("6"), WatchStep::Hang]);
    let h = Harness::new(fake, |r| streaming(r).with_backoff(exact_backoff())).start();
    let requests = h.requests(2).await;
    assert!(requests.iter().all(|r| !r.is_list()));
    assert!(watch_params(&requests[1]).send_initial_events);
    // A server still starting answers so: asked again on the readiness cadence (250 ms,
    // stretched by up to 25 %), not after a backoff step.
    let waited = gap(requests[0].at(), requests[1].at());
    assert!((0.25..0.3125).contains(&waited), "{waited}");
    h.until("synced", |h| h.last_rv() == "6").await;
    assert_eq!(
        h.store.ops(),
        [
            Op::Part(vec!["a".into()]),
            Op::PartsDone(vec![], "6".into())
        ]
    );
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn expired_or_too_large_retries_the_stream_with_a_consistent_read() {
    let fake = Fake::new();
    // The first sync and a later relist: the relist streams from the last version (20), which the
    // server says is too large; the retry asks for "".
    fake.push_watch(vec![end("20"), error_event_expired()]);
    fake.push_watch(vec![event(WatchEvent::Error(
        Status::too_large_resource_version(),
    ))]);
    fake.push_watch(vec![added("a", 1, "15"), end("16"), WatchStep::Hang]);
    let h = Harness::new(fake, streaming).start();
    let requests = h.requests(3).await;
    assert_eq!(shapes(&requests), r#"watch@"" watch@20 watch@"""#);
    assert!(requests.iter().all(|r| watch_params(r).send_initial_events));
    h.until("synced", |h| h.last_rv() == "16").await;
    h.stop().await;
}

fn error_event_expired() -> WatchStep<Obj> {
    event(WatchEvent::Error(Status::expired("too old")))
}

#[tokio::test(start_paused = true)]
async fn a_429_on_the_streaming_list_waits_and_retries_the_stream() {
    let fake = Fake::new();
    fake.push_watch_error(Error::Api(Status::too_many_requests(Some(
        Duration::from_secs(4),
    ))));
    fake.push_watch(vec![end("3"), WatchStep::Hang]);
    let h = Harness::new(fake, streaming).start();
    let requests = h.requests(2).await;
    assert!(watch_params(&requests[1]).send_initial_events);
    assert_eq!(gap(requests[0].at(), requests[1].at()), 4.0);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_lister_watcher_that_cannot_stream_is_listed_and_watched() {
    // As client-go's fake clients: the setting is ignored, not waited on.
    let fake = Fake::new();
    fake.push_list(ListPage::new(vec![obj("a", 1)], "10"));
    fake.push_watch(vec![WatchStep::Hang]);
    let h = Harness::over(fake, streaming).start();
    let requests = h.requests(2).await;
    assert!(requests[0].is_list(), "{requests:?}");
    assert!(!watch_params(&requests[1]).send_initial_events);
    assert_eq!(h.reflector.streaming_fallbacks(), 0, "not a fallback");
    assert_eq!(
        h.store.ops(),
        [
            Op::Part(vec!["a".into()]),
            Op::PartsDone(vec![], "10".into())
        ]
    );
}

/// The first streaming list is handed to the store a quarter of a page size of initial events
/// at a time; an object deleted after its part was handed over is taken back, so the end
/// deletes it.
#[tokio::test(start_paused = true)]
async fn the_first_streaming_list_goes_by_page_and_a_deletion_takes_back_a_handed_over_key() {
    let fake = Fake::new();
    fake.push_watch(vec![
        added("a", 1, "3"),
        added("b", 1, "4"),
        added("c", 1, "5"),
        deleted("a", 1, "6"),
        end("7"),
        WatchStep::Hang,
    ]);
    let h = Harness::new(fake, |r| streaming(r).with_page_size(8)).start();
    h.requests(1).await;
    h.until("synced", |h| h.last_rv() == "7").await;
    assert_eq!(
        h.store.ops(),
        [
            Op::Part(vec!["a".into(), "b".into()]),
            Op::Part(vec!["c".into()]),
            Op::PartsDone(vec!["a".into()], "7".into()),
        ]
    );
    assert_eq!(h.store.content(), [("b".into(), 1), ("c".into(), 1)]);
    h.stop().await;
}

/// A streaming list with pages of 4 (parts of 1) of `a` then `rest` (resource versions 3, 4,
/// …, the end bookmark's the next), whose queue holds 5 changes (a page is the bound):
/// started, its first part handed over and the next held back, the clock not moved.
async fn held_back_after_a(rest: &[&str]) -> Harness {
    let fake = Fake::new();
    let mut steps = vec![added("a", 1, "3")];
    for (i, name) in rest.iter().enumerate() {
        steps.push(added(name, 1, &(4 + i).to_string()));
    }
    steps.extend([end(&(4 + rest.len()).to_string()), WatchStep::Hang]);
    fake.push_watch(steps);
    let h = Harness::new(fake, |r| streaming(r).with_page_size(4));
    *h.store.backlog.lock() = Some(5);
    let h = h.start();
    h.requests(1).await;
    h.until("a part handed over", |h| !h.store.ops().is_empty())
        .await;
    h.settle().await;
    assert_eq!(
        h.store.ops(),
        [Op::Part(vec!["a".into()])],
        "the next part waits"
    );
    h
}

/// A streaming list's initial events come as fast as the server sends them: handed over a
/// quarter of a page at a time, and held back while the queue's consumer has more than a page
/// to take, so that a consumer slower than the stream (a cache that packs its objects) never
/// has more than a page and a quarter queued.
#[tokio::test(start_paused = true)]
async fn a_streaming_list_hands_over_quarter_pages_and_waits_for_a_lagging_consumer() {
    let h = held_back_after_a(&["b", "c"]).await;
    tokio::time::sleep(std::time::Duration::from_secs(60)).await;
    assert_eq!(
        h.store.ops(),
        [Op::Part(vec!["a".into()])],
        "the next part still waits"
    );

    // Caught up to the bound: the rest goes on once the wait looks again.
    *h.store.backlog.lock() = Some(4);
    h.until_in_time("synced", |h| h.last_rv() == "6").await;
    assert_eq!(
        h.store.ops(),
        [
            Op::Part(vec!["a".into()]),
            Op::Part(vec!["b".into()]),
            Op::Part(vec!["c".into()]),
            Op::PartsDone(vec![], "6".into()),
        ]
    );
    h.stop().await;
}

/// A streaming list waiting for a lagging consumer goes on as soon as the queue wakes it
/// (its consumer has taken what leaves a page or less), without waiting for its next look: the
/// clock does not move.
#[tokio::test(start_paused = true)]
async fn a_waiting_streaming_list_goes_on_when_the_queue_wakes_it() {
    let h = held_back_after_a(&["b"]).await;
    let woken_at = tokio::time::Instant::now();
    h.store.catch_up(4);
    h.until("synced", |h| h.last_rv() == "5").await;
    assert_eq!(
        tokio::time::Instant::now(),
        woken_at,
        "no timer was waited for"
    );
    assert_eq!(
        h.store.ops(),
        [
            Op::Part(vec!["a".into()]),
            Op::Part(vec!["b".into()]),
            Op::PartsDone(vec![], "5".into()),
        ]
    );
    h.stop().await;
}

/// A streaming relist that is not by page (the default after the first list) keeps every
/// initial event for its one replace, however many page sizes of them come.
#[tokio::test(start_paused = true)]
async fn a_streaming_relist_collected_whole_keeps_every_object() {
    let fake = Fake::new();
    fake.push_watch(vec![added("a", 1, "3"), end("4"), error_event_expired()]);
    fake.push_watch(vec![
        added("a", 2, "5"),
        added("b", 1, "6"),
        added("c", 1, "7"),
        added("d", 1, "8"),
        added("e", 1, "9"),
        end("10"),
        WatchStep::Hang,
    ]);
    let h = Harness::new(fake, |r| streaming(r).with_page_size(2)).start();
    h.requests(2).await;
    h.until("relisted", |h| h.last_rv() == "10").await;
    let names = ["a", "b", "c", "d", "e"].map(String::from).to_vec();
    assert_eq!(h.store.ops().last(), Some(&Op::Replace(names, "10".into())));
    assert_eq!(
        h.store.content(),
        [
            ("a".into(), 2),
            ("b".into(), 1),
            ("c".into(), 1),
            ("d".into(), 1),
            ("e".into(), 1)
        ]
    );
    h.stop().await;
}
