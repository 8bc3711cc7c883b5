//! A resource the server does not serve (a list answered `404 NotFound`: its CRD not
//! installed yet, or deleted): the reflector waits for it on a calm cadence, says so through
//! its availability, starts as soon as a list succeeds, and, when a served resource goes
//! away, deletes what it cached (or stops, if told to). On tokio's paused clock.

use crate::common;

use std::time::Duration;

use common::*;
use informer_reflector::{
    Availability, Error, ListPage, NOT_SERVED_POLL, Request, Status, WatchEvent, WatchStep,
};
use informer_store::{key_func, meta_namespace_key};

fn not_found() -> Error {
    Error::Api(Status::new(
        404,
        "NotFound",
        "the server could not find the requested resource",
    ))
}

fn lists(requests: &[Request]) -> usize {
    requests.iter().filter(|r| r.is_list()).count()
}

/// The first `n` requests are lists, one every `poll` (each gap up to 20 % longer): a calm,
/// flat cadence, never growing like a backoff.
fn assert_listed_every(requests: &[Request], n: usize, poll: Duration) {
    assert_eq!(lists(requests), n, "{requests:#?}");
    for w in requests[..n].windows(2) {
        let g = gap(w[0].at(), w[1].at());
        let poll = poll.as_secs_f64();
        assert!((poll..poll * 1.2).contains(&g), "gap {g}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_resource_not_served_is_listed_every_five_seconds_without_backoff_until_it_is() {
    let fake = Fake::new();
    for _ in 0..8 {
        fake.push_list_error(not_found());
    }
    fake.push_list(ListPage::new(vec![obj("a", 1)], "10"));
    fake.push_watch(vec![WatchStep::Hang]);
    let h = Harness::new(fake, |r| r).start();

    let requests = h.requests(10).await;
    // The cadence stays calm and flat: every gap in [5 s, 6 s), never growing like a backoff.
    assert_listed_every(&requests, 9, NOT_SERVED_POLL);
    // Nothing was written while it was not served; then the list is the first replace.
    assert_eq!(
        h.store.ops(),
        [
            Op::Part(vec!["a".into()]),
            Op::PartsDone(vec![], "10".into())
        ]
    );
    assert_eq!(h.reflector.availability(), Availability::Served);
    assert_eq!(h.reflector.not_served_since(), None);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_reflector_given_its_own_not_served_poll_lists_on_that_cadence() {
    let fake = Fake::new();
    for _ in 0..4 {
        fake.push_list_error(not_found());
    }
    fake.push_list(ListPage::new(vec![obj("a", 1)], "10"));
    fake.push_watch(vec![WatchStep::Hang]);
    let poll = Duration::from_millis(200);
    let h = Harness::new(fake, move |r| r.with_not_served_poll(poll)).start();

    let requests = h.requests(6).await;
    assert_listed_every(&requests, 5, poll);
    assert_eq!(h.reflector.availability(), Availability::Served);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn availability_is_told_as_it_changes_and_not_served_since_the_first_404() {
    let fake = Fake::new();
    fake.push_list_error(not_found());
    fake.push_list_error(not_found());
    let h = Harness::new(fake, |r| r);
    let mut availability = h.reflector.subscribe_availability();
    assert_eq!(*availability.borrow_and_update(), Availability::Unknown);
    let h = h.start();
    let requests = h.requests(2).await;
    availability
        .wait_for(|a| *a == Availability::NotServed)
        .await
        .expect("told");
    // Since the first answer, not the second.
    assert_eq!(h.reflector.not_served_since(), Some(requests[0].at()));
    h.fake.push_list(ListPage::new(vec![], "3"));
    h.fake.push_watch(vec![WatchStep::Hang]);
    availability
        .wait_for(|a| *a == Availability::Served)
        .await
        .expect("told");
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_resource_that_goes_away_has_its_objects_deleted_and_is_waited_for() {
    let fake = Fake::new();
    fake.push_list(ListPage::new(vec![obj("a", 1), obj("b", 1)], "10"));
    // The CRD is deleted: its watch closes cleanly, the re-watch and the relist are 404.
    fake.push_watch(vec![
        WatchStep::Event(WatchEvent::modified(obj("a", 2), "11")),
        WatchStep::Wait(Duration::from_secs(2)),
    ]);
    fake.push_watch_error(not_found());
    fake.push_list_error(not_found());
    fake.push_list_error(not_found());
    // Installed again, with one object.
    fake.push_list(ListPage::new(vec![obj("c", 1)], "20"));
    fake.push_watch(vec![WatchStep::Hang]);
    let h = Harness::new(fake, |r| r).start();

    let requests = h.requests(7).await;
    assert_eq!(lists(&requests), 4);
    assert_eq!(
        h.store.ops(),
        [
            Op::Part(vec!["a".into(), "b".into()]),
            Op::PartsDone(vec![], "10".into()),
            Op::Update("a".into()),
            // Gone: everything cached is deleted, once, at the version last synced.
            Op::Replace(vec![], "11".into()),
            Op::Replace(vec!["c".into()], "20".into()),
        ]
    );
    // The 404 of the watch is not the server's word: the list after it is.
    let watch_404 = requests[2].at();
    let first_list_404 = requests[3].at();
    assert!(gap(watch_404, first_list_404) >= NOT_SERVED_POLL.as_secs_f64());
    assert_eq!(h.reflector.availability(), Availability::Served);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn told_to_stop_a_reflector_ends_its_run_when_its_resource_goes_away() {
    let fake = Fake::new();
    fake.push_list_error(not_found());
    fake.push_list(ListPage::new(vec![obj("a", 1)], "10"));
    fake.push_watch(vec![WatchStep::Wait(Duration::from_secs(2))]);
    fake.push_watch_error(not_found());
    fake.push_list_error(not_found());
    let mut h = Harness::new(fake, |r| r.with_stop_when_not_served(true)).start();
    let task = h.task.take().expect("started");
    // Not served at the start is waited for; served, then gone, ends the run by itself.
    tokio::time::timeout(Duration::from_secs(3600), task)
        .await
        .expect("the run ends by itself")
        .expect("no panic");
    assert_eq!(lists(&h.fake.requests()), 3);
    assert_eq!(
        h.store.ops(),
        [
            Op::Part(vec!["a".into()]),
            Op::PartsDone(vec![], "10".into())
        ]
    );
    assert_eq!(h.reflector.availability(), Availability::NotServed);
}

#[tokio::test(start_paused = true)]
async fn a_not_served_resource_with_streaming_lists_falls_back_quietly_and_waits() {
    let fake = Fake::new();
    fake.push_watch_error(not_found());
    fake.push_list_error(not_found());
    fake.push_watch_error(not_found());
    fake.push_list(ListPage::new(vec![obj("a", 1)], "10"));
    fake.push_watch(vec![WatchStep::Hang]);
    let h = Harness::new(fake, |r| {
        r.with_streaming_list(key_func(|o: &Obj| meta_namespace_key(None, &o.name)))
    })
    .start();
    let requests = h.requests(5).await;
    assert!(gap(requests[1].at(), requests[2].at()) >= NOT_SERVED_POLL.as_secs_f64());
    // A 404 is not the server refusing streaming lists.
    assert_eq!(h.reflector.streaming_fallbacks(), 0);
    assert_eq!(
        h.store.ops(),
        [
            Op::Part(vec!["a".into()]),
            Op::PartsDone(vec![], "10".into())
        ]
    );
    h.stop().await;
}
