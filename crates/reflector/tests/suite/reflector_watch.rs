//! The watch half of the reflector: applying events, resuming, and reacting to each way a watch
//! ends.

use crate::common;

use std::time::Duration;

use common::*;
use informer_reflector::{Error, ListPage, Status, WatchEvent, WatchStep};

fn error_event(status: Status) -> WatchStep<Obj> {
    event(WatchEvent::Error(status))
}

#[tokio::test(start_paused = true)]
async fn events_become_store_writes_and_move_the_resume_version() {
    let fake = Fake::new();
    fake.push_list(ListPage::new(vec![obj("a", 1), obj("b", 1)], "10"));
    fake.push_watch(vec![
        added("c", 1, "11"),
        modified("a", 2, "12"),
        deleted("b", 1, "13"),
        bookmark("20"),
        WatchStep::Hang,
    ]);
    let h = Harness::new(fake, |r| r).start();
    h.requests(2).await;
    h.until("the bookmark is seen", |h| h.last_rv() == "20")
        .await;

    assert_eq!(
        h.store.ops(),
        [
            Op::Part(vec!["a".into(), "b".into()]),
            Op::PartsDone(vec![], "10".into()),
            Op::Add("c".into()),
            Op::Update("a".into()),
            Op::Delete("b".into()),
            Op::Bookmark("20".into()),
        ]
    );
    assert_eq!(h.store.content(), [("a".into(), 2), ("c".into(), 1)]);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_clean_close_resumes_at_once_from_the_last_version_without_a_relist() {
    let fake = Fake::new();
    fake.push_list(ListPage::new(vec![], "10"));
    fake.push_watch(vec![
        WatchStep::Wait(Duration::from_secs(300)),
        added("a", 1, "11"),
    ]);
    fake.push_watch(vec![bookmark("15")]);
    fake.push_watch(vec![WatchStep::Hang]);
    let h = Harness::new(fake, |r| r).start();

    let requests = h.requests(4).await;
    assert_eq!(shapes(&requests), "list@0 watch@10 watch@11 watch@15");
    assert_eq!(gap(requests[1].at(), requests[2].at()), 300.0);
    // The second watch closed at once but had an event: not a very short watch.
    assert_eq!(requests[3].at(), requests[2].at());
    assert!(h.errors.lock().is_empty());
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_quiet_watch_that_lasted_a_second_is_a_normal_close() {
    let fake = Fake::new();
    fake.push_list(ListPage::new(vec![], "10"));
    fake.push_watch(vec![WatchStep::Wait(Duration::from_secs(1))]);
    fake.push_watch(vec![WatchStep::Hang]);
    let h = Harness::new(fake, |r| r).start();
    let requests = h.requests(3).await;
    assert_eq!(shape(&requests[2]), "watch@10");
    assert!(h.errors.lock().is_empty());
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_very_short_watch_is_an_error_and_relists_after_a_backoff_delay() {
    let fake = Fake::new();
    fake.push_list(ListPage::new(vec![], "10"));
    fake.push_watch(vec![WatchStep::Wait(Duration::from_millis(999))]);
    fake.push_list(ListPage::new(vec![], "10"));
    fake.push_watch(vec![WatchStep::Hang]);
    let h = Harness::new(fake, |r| r.with_backoff(exact_backoff())).start();

    let requests = h.requests(4).await;
    assert_eq!(shapes(&requests), "list@0 watch@10 list@10 watch@10");
    assert!((gap(requests[1].at(), requests[2].at()) - 1.799).abs() < 1e-9);
    assert_eq!(h.errors.lock().len(), 1);
    assert!(h.errors.lock()[0].contains("very short watch"));
    h.stop().await;
}

/// A 410 is answered by a relist at the last version, at once (the relist is the recovery);
/// a second 410 before a healthy watch waits a backoff delay, so a 410 loop is still paced.
#[tokio::test(start_paused = true)]
async fn an_expired_error_event_relists_at_the_last_version_at_once_and_a_second_after_a_backoff_delay()
 {
    let fake = Fake::new();
    fake.push_list(ListPage::new(vec![obj("a", 1), obj("b", 1)], "10"));
    fake.push_watch(vec![
        modified("a", 2, "12"),
        error_event(Status::expired("too old")),
    ]);
    fake.push_list(ListPage::new(vec![obj("a", 3)], "30"));
    fake.push_watch(vec![
        modified("a", 4, "31"),
        error_event(Status::expired("too old again")),
    ]);
    fake.push_list(ListPage::new(vec![obj("a", 5)], "40"));
    fake.push_watch(vec![WatchStep::Hang]);
    let h = Harness::new(fake, |r| r.with_backoff(exact_backoff())).start();

    let requests = h.requests(6).await;
    assert_eq!(
        shapes(&requests),
        "list@0 watch@10 list@12 watch@30 list@31 watch@40"
    );
    assert_eq!(gap(requests[1].at(), requests[2].at()), 0.0);
    assert_eq!(gap(requests[3].at(), requests[4].at()), 0.8);
    assert_eq!(h.store.content(), [("a".into(), 5)]);
    assert_eq!(h.errors.lock().as_slice(), ["Expired 410", "Expired 410"]);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn gone_is_treated_like_expired_both_as_event_and_as_http_error() {
    let fake = Fake::new();
    fake.push_list(ListPage::new(vec![], "10"));
    fake.push_watch(vec![error_event(Status::new(410, "Gone", "gone"))]);
    fake.push_list(ListPage::new(vec![], "20"));
    fake.push_watch_error(Error::Api(Status::expired("too old")));
    fake.push_list(ListPage::new(vec![], "30"));
    fake.push_watch(vec![WatchStep::Hang]);
    let h = Harness::new(fake, |r| r).start();
    let requests = h.requests(6).await;
    assert_eq!(
        shapes(&requests),
        "list@0 watch@10 list@10 watch@20 list@20 watch@30"
    );
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_too_large_error_event_relists_with_a_consistent_read() {
    let fake = Fake::new();
    fake.push_list(ListPage::new(vec![], "10"));
    fake.push_watch(vec![error_event(Status::too_large_resource_version())]);
    fake.push_list(ListPage::new(vec![], "8"));
    fake.push_watch(vec![WatchStep::Hang]);
    let h = Harness::new(fake, |r| r).start();
    let requests = h.requests(4).await;
    assert_eq!(shape(&requests[2]), r#"list@"""#);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_429_on_watch_start_waits_retry_after_and_rewatches_without_relisting() {
    let fake = Fake::new();
    fake.push_list(ListPage::new(vec![], "10"));
    fake.push_watch_error(Error::Api(Status::too_many_requests(Some(
        Duration::from_secs(7),
    ))));
    fake.push_watch_error(Error::Api(Status::too_many_requests(None)));
    fake.push_watch(vec![WatchStep::Hang]);
    let h = Harness::new(fake, |r| r.with_backoff(exact_backoff())).start();

    let requests = h.requests(4).await;
    assert_eq!(shapes(&requests), "list@0 watch@10 watch@10 watch@10");
    assert_eq!(gap(requests[1].at(), requests[2].at()), 7.0);
    // Without Retry-After: the readiness cadence's first delay (250 ms, up to 25 % longer).
    let waited = gap(requests[2].at(), requests[3].at());
    assert!((0.25..0.3125).contains(&waited), "{waited}");
    assert!(h.errors.lock().is_empty());
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_429_error_event_waits_retry_after_and_rewatches_from_the_last_version() {
    let fake = Fake::new();
    fake.push_list(ListPage::new(vec![], "10"));
    fake.push_watch(vec![
        added("a", 1, "11"),
        error_event(Status::too_many_requests(Some(Duration::from_secs(2)))),
    ]);
    fake.push_watch(vec![WatchStep::Hang]);
    let h = Harness::new(fake, |r| r).start();
    let requests = h.requests(3).await;
    assert_eq!(shape(&requests[2]), "watch@11");
    assert_eq!(gap(requests[1].at(), requests[2].at()), 2.0);
    h.stop().await;
}

/// A refused connection is a server not ready (restarting): asked again on the readiness
/// cadence (250 ms, ×1.5 a step, each up to 25 % longer), without relisting.
#[tokio::test(start_paused = true)]
async fn connection_refused_is_retried_on_the_readiness_cadence_and_never_relists() {
    let fake = Fake::new();
    fake.push_list(ListPage::new(vec![], "10"));
    for _ in 0..4 {
        fake.push_watch_error(Error::ConnectionRefused("refused".into()));
    }
    fake.push_watch(vec![WatchStep::Hang]);
    let h = Harness::new(fake, |r| r.with_backoff(exact_backoff())).start();

    let requests = h.requests(6).await;
    assert!(requests[1..].iter().all(|r| !r.is_list()));
    assert!(requests[1..].iter().all(|r| r.resource_version() == "10"));
    let gaps: Vec<f64> = requests[1..]
        .windows(2)
        .map(|w| gap(w[0].at(), w[1].at()))
        .collect();
    let nominal = [0.25, 0.375, 0.5625, 0.84375];
    for (gap, nominal) in gaps.iter().zip(nominal) {
        assert!(
            *gap >= nominal && *gap < nominal * 1.25,
            "{gaps:?} against {nominal}"
        );
    }
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn another_watch_start_error_relists_at_the_last_version_after_backoff() {
    let fake = Fake::new();
    fake.push_list(ListPage::new(vec![], "10"));
    fake.push_watch_error(Error::Api(Status::new(403, "Forbidden", "denied")));
    fake.push_list(ListPage::new(vec![], "11"));
    fake.push_watch(vec![WatchStep::Hang]);
    let h = Harness::new(fake, |r| r.with_backoff(exact_backoff())).start();
    let requests = h.requests(4).await;
    assert_eq!(shape(&requests[2]), "list@10");
    assert_eq!(gap(requests[1].at(), requests[2].at()), 0.8);
    assert_eq!(h.errors.lock().as_slice(), ["Other 403"]);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn an_error_event_that_is_not_a_status_relists_after_backoff() {
    let fake = Fake::new();
    fake.push_list(ListPage::new(vec![], "10"));
    fake.push_watch(vec![added("a", 1, "11"), error_event(Status::default())]);
    fake.push_list(ListPage::new(vec![obj("a", 1)], "11"));
    fake.push_watch(vec![WatchStep::Hang]);
    let h = Harness::new(fake, |r| r.with_backoff(exact_backoff())).start();
    let requests = h.requests(4).await;
    assert_eq!(shape(&requests[2]), "list@11");
    assert_eq!(gap(requests[1].at(), requests[2].at()), 0.8);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn internal_errors_relist_by_default_and_rewatch_inside_the_retry_window() {
    let script = || {
        let fake = Fake::new();
        fake.push_list(ListPage::new(vec![], "10"));
        fake.push_watch(vec![
            added("a", 1, "11"),
            error_event(Status::internal_error("boom")),
        ]);
        fake.push_list(ListPage::new(vec![], "12"));
        fake.push_watch(vec![WatchStep::Hang]);
        fake
    };

    // Without a retry window (the default): relist.
    let default = Harness::new(script(), |r| r).start();
    let requests = default.requests(3).await;
    assert_eq!(shape(&requests[2]), "list@11");
    default.stop().await;

    let fake = Fake::new();
    fake.push_list(ListPage::new(vec![], "10"));
    fake.push_watch(vec![
        added("a", 1, "11"),
        error_event(Status::internal_error("boom")),
    ]);
    fake.push_watch(vec![
        added("b", 1, "12"),
        event(WatchEvent::Error(Status::internal_error("boom"))),
    ]);
    fake.push_watch(vec![WatchStep::Hang]);
    let windowed = Harness::new(fake, |r| {
        r.with_max_internal_error_retry(Duration::from_secs(30))
    })
    .start();
    let requests = windowed.requests(4).await;
    assert_eq!(shapes(&requests), "list@0 watch@10 watch@11 watch@12");
    assert_eq!(requests[3].at(), requests[1].at(), "re-watched at once");
    windowed.stop().await;
}

#[tokio::test(start_paused = true)]
async fn an_undecodable_event_ends_the_watch_without_applying_anything_and_relists() {
    let fake = Fake::new();
    fake.push_list(ListPage::new(vec![], "10"));
    fake.push_watch(vec![
        added("a", 1, "11"),
        WatchStep::Fail(Error::decode("malformed watch line")),
        added("never", 1, "99"),
    ]);
    fake.push_list(ListPage::new(vec![obj("a", 1)], "11"));
    fake.push_watch(vec![WatchStep::Hang]);
    let h = Harness::new(fake, |r| r).start();
    let requests = h.requests(4).await;
    assert_eq!(shape(&requests[2]), "list@11");
    assert!(!h.store.ops().contains(&Op::Add("never".into())));
    assert_eq!(h.store.content(), [("a".into(), 1)]);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_transport_failure_mid_stream_resumes_from_the_last_complete_event() {
    let fake = Fake::new();
    fake.push_list(ListPage::new(vec![], "10"));
    fake.push_watch(vec![
        added("a", 1, "11"),
        WatchStep::Fail(Error::Transport("connection reset".into())),
    ]);
    fake.push_watch(vec![WatchStep::Hang]);
    let h = Harness::new(fake, |r| r).start();
    let requests = h.requests(3).await;
    assert_eq!(shape(&requests[2]), "watch@11");
    assert_eq!(requests[2].at(), requests[1].at());
    assert!(h.errors.lock().is_empty());
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn synthetic_added_events_of_a_watch_from_0_never_become_the_resume_version() {
    let fake = Fake::new();
    // A server whose list reports version "0": the watch then starts at "0" and opens with the
    // current state as ADDED events in key order, their versions unordered.
    fake.push_list(ListPage::new(vec![], "0"));
    fake.push_watch(vec![
        added("a", 1, "50"),
        added("b", 1, "30"),
        WatchStep::Fail(Error::Transport("reset".into())),
    ]);
    fake.push_watch(vec![
        added("c", 1, "20"),
        modified("a", 2, "60"),
        added("d", 1, "61"),
        WatchStep::Hang,
    ]);
    let h = Harness::new(fake, |r| r).start();
    let requests = h.requests(3).await;
    // Resumed at "0", not at 30 or 50.
    assert_eq!(shape(&requests[2]), "watch@0");
    h.until("past the initial events", |h| h.last_rv() == "61")
        .await;
    assert_eq!(
        h.store.content(),
        [
            ("a".into(), 2),
            ("b".into(), 1),
            ("c".into(), 1),
            ("d".into(), 1)
        ]
    );
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn duplicate_and_unknown_key_events_are_upserts_and_no_ops() {
    let fake = Fake::new();
    fake.push_list(ListPage::new(vec![obj("a", 1)], "10"));
    fake.push_watch(vec![
        added("a", 2, "11"),
        added("a", 2, "11"),
        modified("x", 1, "12"),
        deleted("ghost", 1, "13"),
        modified("a", 2, "13"),
        WatchStep::Hang,
    ]);
    let h = Harness::new(fake, |r| r).start();
    h.requests(2).await;
    h.until("all applied", |h| {
        // The list's part and its end, then the five events.
        h.last_rv() == "13" && h.store.ops().len() == 7
    })
    .await;
    assert_eq!(h.store.content(), [("a".into(), 2), ("x".into(), 1)]);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_store_error_on_an_event_is_logged_and_the_watch_goes_on() {
    let fake = Fake::new();
    fake.push_list(ListPage::new(vec![], "10"));
    fake.push_watch(vec![
        added("", 1, "11"),
        added("b", 1, "12"),
        WatchStep::Hang,
    ]);
    let h = Harness::new(fake, |r| r).start();
    h.requests(2).await;
    h.until("b applied", |h| h.last_rv() == "12").await;
    assert_eq!(h.store.content(), [("b".into(), 1)]);
    assert!(h.errors.lock().is_empty());
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn out_of_order_events_are_applied_as_delivered_and_the_last_one_is_the_resume_version() {
    // The server promises order; the reflector does not second-guess it (neither does
    // client-go): an older version after a newer one is written, and becomes the resume point.
    let fake = Fake::new();
    fake.push_list(ListPage::new(vec![obj("a", 1)], "10"));
    fake.push_watch(vec![modified("a", 3, "13"), modified("a", 2, "12")]);
    fake.push_watch(vec![WatchStep::Hang]);
    let h = Harness::new(fake, |r| r).start();

    let requests = h.requests(3).await;
    assert_eq!(shapes(&requests), "list@0 watch@10 watch@12");
    assert_eq!(
        h.store.ops(),
        [
            Op::Part(vec!["a".into()]),
            Op::PartsDone(vec![], "10".into()),
            Op::Update("a".into()),
            Op::Update("a".into()),
        ]
    );
    assert_eq!(h.store.content(), [("a".into(), 2)]);
    h.stop().await;
}
