//! The list half of the reflector: resource versions, pagination, and list-side recovery.

use crate::common;

use common::*;
use informer_reflector::{Error, ListPage, Request, Status, WatchStep};

fn list_params(r: &Request) -> &informer_reflector::ListParams {
    match r {
        Request::List { params, .. } => params,
        other => panic!("expected a list, got {other:?}"),
    }
}

fn watch_params(r: &Request) -> &informer_reflector::WatchParams {
    match r {
        Request::Watch { params, .. } => params,
        other => panic!("expected a watch, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn first_list_is_at_0_in_pages_of_500_then_watches_from_the_list_version() {
    let fake = Fake::new();
    fake.push_list(ListPage::new(vec![obj("a", 1), obj("b", 1)], "10"));
    fake.push_watch(vec![WatchStep::Hang]);
    let h = Harness::new(fake, |r| r).start();

    let requests = h.requests(2).await;
    let list = list_params(&requests[0]);
    assert_eq!(list.resource_version, "0");
    assert_eq!(list.limit, Some(500));
    assert_eq!(list.continue_token, None);
    assert_eq!(list.resource_version_match, None);

    let watch = watch_params(&requests[1]);
    assert_eq!(watch.resource_version, "10");
    assert!(watch.allow_bookmarks);
    assert!(!watch.send_initial_events);
    let timeout = watch.timeout.unwrap().as_secs();
    assert!((300..600).contains(&timeout), "timeout {timeout}");

    // The first list is handed to the store page by page, then ended at its version.
    assert_eq!(
        h.store.ops(),
        [
            Op::Part(vec!["a".into(), "b".into()]),
            Op::PartsDone(vec![], "10".into())
        ]
    );
    assert_eq!(h.store.content(), [("a".into(), 1), ("b".into(), 1)]);
    assert_eq!(h.last_rv(), "10");
    // The list and the watch happen at once, with no delay.
    assert_eq!(requests[1].at(), requests[0].at());
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn pages_are_followed_with_continue_and_without_a_resource_version() {
    let fake = Fake::new();
    fake.push_list(ListPage::new(vec![obj("a", 1)], "20").with_continue("t1"));
    fake.push_list(ListPage::new(vec![], "20").with_continue("t2"));
    fake.push_list(ListPage::new(vec![obj("c", 1)], "20"));
    fake.push_watch(vec![WatchStep::Hang]);
    let h = Harness::new(fake, |r| r.with_page_size(2)).start();

    let requests = h.requests(4).await;
    let pages: Vec<_> = requests[..3].iter().map(list_params).collect();
    assert_eq!(pages[0].resource_version, "0");
    assert_eq!(pages[0].continue_token, None);
    for (page, token) in pages[1..].iter().zip(["t1", "t2"]) {
        assert_eq!(page.continue_token.as_deref(), Some(token));
        assert_eq!(
            page.resource_version, "",
            "continuation pages carry no resource version"
        );
        assert_eq!(page.resource_version_match, None);
        assert_eq!(page.limit, Some(2));
    }
    assert_eq!(watch_params(&requests[3]).resource_version, "20");
    assert_eq!(
        h.store.ops(),
        [
            Op::Part(vec!["a".into()]),
            Op::Part(vec!["c".into()]),
            Op::PartsDone(vec![], "20".into())
        ]
    );
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn an_expired_continue_token_leads_to_one_full_list_at_the_original_version() {
    let fake = Fake::new();
    // First cycle: list at "0" paginated, then a watch that fails with 410 → relist at "20".
    fake.push_list(ListPage::new(vec![obj("a", 1)], "20"));
    fake.push_watch(vec![event(informer_reflector::WatchEvent::Error(
        Status::expired("too old"),
    ))]);
    // The relist is paginated (page size set) and its token expires on page 2.
    fake.push_list(ListPage::new(vec![obj("a", 2)], "30").with_continue("t1"));
    fake.push_list_error(Error::Api(Status::expired("continue too old")));
    fake.push_list(ListPage::new(vec![obj("a", 2), obj("b", 1)], "31"));
    fake.push_watch(vec![WatchStep::Hang]);
    let h = Harness::new(fake, |r| r.with_page_size(1)).start();

    let requests = h.requests(6).await;
    assert_eq!(
        shapes(&requests),
        r#"list@0 watch@20 list@20 list@"" list@20 watch@31"#
    );
    let full = list_params(&requests[4]);
    assert_eq!(full.limit, None, "the fallback is one unpaginated list");
    assert_eq!(full.continue_token, None);
    assert_eq!(
        list_params(&requests[3]).continue_token.as_deref(),
        Some("t1")
    );
    assert_eq!(h.store.content(), [("a".into(), 2), ("b".into(), 1)]);
    assert_eq!(h.last_rv(), "31");
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_list_by_page_hands_each_page_to_the_store_as_it_arrives() {
    let fake = Fake::new();
    fake.push_list(ListPage::new(vec![obj("a", 1), obj("b", 1)], "20").with_continue("t1"));
    fake.push_list(ListPage::new(vec![], "20").with_continue("t2"));
    fake.push_list(ListPage::new(vec![obj("c", 1)], "21"));
    fake.push_watch(vec![WatchStep::Hang]);
    let h = Harness::new(fake, |r| r.with_page_size(2).with_relist_by_page(true)).start();

    let requests = h.requests(4).await;
    assert_eq!(shapes(&requests), r#"list@0 list@"" list@"" watch@21"#);
    assert_eq!(
        h.store.ops(),
        [
            Op::Part(vec!["a".into(), "b".into()]),
            // An empty page has nothing to hand over.
            Op::Part(vec!["c".into()]),
            // The last page's version is the list's.
            Op::PartsDone(vec![], "21".into()),
        ]
    );
    assert_eq!(
        h.store.content(),
        [("a".into(), 1), ("b".into(), 1), ("c".into(), 1)]
    );
    assert_eq!(h.last_rv(), "21");
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_list_by_page_hands_a_long_page_to_the_store_a_page_size_at_a_time() {
    // A server that ignores the limit answers with everything at once: the store still gets
    // it a page size at a time.
    let fake = Fake::new();
    let items = ["a", "b", "c", "d", "e"].map(|n| obj(n, 1)).to_vec();
    fake.push_list(ListPage::new(items, "20"));
    fake.push_watch(vec![WatchStep::Hang]);
    let h = Harness::new(fake, |r| r.with_page_size(2).with_relist_by_page(true)).start();

    h.requests(2).await;
    assert_eq!(
        h.store.ops(),
        [
            Op::Part(vec!["a".into(), "b".into()]),
            Op::Part(vec!["c".into(), "d".into()]),
            Op::Part(vec!["e".into()]),
            Op::PartsDone(vec![], "20".into()),
        ]
    );
    assert_eq!(h.store.content().len(), 5);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_relist_by_page_deletes_what_none_of_its_pages_listed() {
    let fake = Fake::new();
    fake.push_list(ListPage::new(
        vec![obj("a", 1), obj("b", 1), obj("c", 1)],
        "20",
    ));
    fake.push_watch(vec![event(informer_reflector::WatchEvent::Error(
        Status::expired("too old"),
    ))]);
    fake.push_list(ListPage::new(vec![obj("a", 2)], "30").with_continue("t1"));
    fake.push_list(ListPage::new(vec![obj("d", 1)], "30"));
    fake.push_watch(vec![WatchStep::Hang]);
    let h = Harness::new(fake, |r| r.with_relist_by_page(true)).start();

    h.requests(5).await;
    // The first list (a part and its end), then the relist.
    assert_eq!(
        &h.store.ops()[2..],
        [
            Op::Part(vec!["a".into()]),
            Op::Part(vec!["d".into()]),
            Op::PartsDone(vec!["b".into(), "c".into()], "30".into()),
        ]
    );
    assert_eq!(h.store.content(), [("a".into(), 2), ("d".into(), 1)]);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_list_by_page_restarts_its_parts_when_it_falls_back_to_one_full_list() {
    let fake = Fake::new();
    fake.push_list(ListPage::new(vec![obj("a", 1)], "20"));
    fake.push_watch(vec![event(informer_reflector::WatchEvent::Error(
        Status::expired("too old"),
    ))]);
    // The relist's first page lists "x"; its token expires; the full list (a later snapshot)
    // no longer has "x", so the end must delete it although a page listed it.
    fake.push_list(ListPage::new(vec![obj("x", 1)], "30").with_continue("t1"));
    fake.push_list_error(Error::Api(Status::expired("continue too old")));
    fake.push_list(ListPage::new(vec![obj("a", 2), obj("b", 1)], "31"));
    fake.push_watch(vec![WatchStep::Hang]);
    let h = Harness::new(fake, |r| r.with_page_size(1).with_relist_by_page(true)).start();

    let requests = h.requests(6).await;
    assert_eq!(
        shapes(&requests),
        r#"list@0 watch@20 list@20 list@"" list@20 watch@31"#
    );
    assert_eq!(
        &h.store.ops()[2..],
        [
            Op::Part(vec!["x".into()]),
            // The full list, a page size (one) at a time.
            Op::Part(vec!["a".into()]),
            Op::Part(vec!["b".into()]),
            Op::PartsDone(vec!["x".into()], "31".into()),
        ]
    );
    assert_eq!(h.store.content(), [("a".into(), 2), ("b".into(), 1)]);
    assert_eq!(h.last_rv(), "31");
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_relist_by_page_that_fails_leaves_its_pages_applied_and_deletes_nothing() {
    let fake = Fake::new();
    fake.push_list(ListPage::new(vec![obj("a", 1), obj("b", 1)], "20"));
    fake.push_watch(vec![event(informer_reflector::WatchEvent::Error(
        Status::expired("too old"),
    ))]);
    fake.push_list(ListPage::new(vec![obj("a", 2)], "30").with_continue("t1"));
    fake.push_list_error(Error::Api(Status::internal_error("etcd unavailable")));
    fake.push_list(ListPage::new(vec![obj("a", 3)], "40"));
    fake.push_watch(vec![WatchStep::Hang]);
    let h = Harness::new(fake, |r| r.with_page_size(1).with_relist_by_page(true)).start();

    let requests = h.requests(6).await;
    assert_eq!(
        shapes(&requests),
        r#"list@0 watch@20 list@20 list@"" list@20 watch@40"#
    );
    let ops = h.store.ops();
    // The first list (a page size, one, at a time), then the failed relist: its first page
    // applied, no end, so "b" is kept.
    assert_eq!(
        ops[..4],
        [
            Op::Part(vec!["a".into()]),
            Op::Part(vec!["b".into()]),
            Op::PartsDone(vec![], "20".into()),
            Op::Part(vec!["a".into()]),
        ]
    );
    assert!(
        !matches!(ops[4], Op::PartsDone(..)),
        "a failed list has no end: {ops:?}"
    );
    // The next list ends, and deletes what it lacks.
    assert_eq!(
        &ops[4..],
        [
            Op::Part(vec!["a".into()]),
            Op::PartsDone(vec!["b".into()], "40".into()),
        ]
    );
    assert_eq!(h.store.content(), [("a".into(), 3)]);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_list_410_relists_at_once_with_a_consistent_read() {
    let fake = Fake::new();
    fake.push_list_error(Error::Api(Status::expired("gone")));
    fake.push_list(ListPage::new(vec![obj("a", 1)], "40"));
    fake.push_watch(vec![WatchStep::Hang]);
    let h = Harness::new(fake, |r| r).start();

    let requests = h.requests(3).await;
    assert_eq!(shapes(&requests), r#"list@0 list@"" watch@40"#);
    assert_eq!(
        requests[1].at(),
        requests[0].at(),
        "no backoff before the consistent relist"
    );
    assert_eq!(list_params(&requests[1]).limit, Some(500));
    assert!(h.errors.lock().is_empty());
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_too_large_resource_version_on_list_relists_at_once_with_a_consistent_read() {
    let fake = Fake::new();
    // The first cycle syncs at 50; the watch then fails with an unknown error → relist at 50.
    fake.push_list(ListPage::new(vec![obj("a", 1)], "50"));
    fake.push_watch(vec![event(informer_reflector::WatchEvent::Error(
        Status::new(403, "Forbidden", "no"),
    ))]);
    // The server was restored from an old snapshot: 50 is in its future.
    fake.push_list_error(Error::Api(Status::too_large_resource_version()));
    fake.push_list(ListPage::new(vec![obj("b", 1)], "12"));
    fake.push_watch(vec![WatchStep::Hang]);
    let h = Harness::new(fake, |r| r).start();

    let requests = h.requests(5).await;
    assert_eq!(
        shapes(&requests),
        r#"list@0 watch@50 list@50 list@"" watch@12"#
    );
    assert_eq!(requests[3].at(), requests[2].at());
    assert_eq!(
        list_params(&requests[2]).limit,
        Some(500),
        "a list at a version asks for pages too"
    );
    assert_eq!(h.store.content(), [("b".into(), 1)]);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn when_the_consistent_relist_fails_too_the_cycle_fails_and_backs_off() {
    let fake = Fake::new();
    fake.push_list_error(Error::Api(Status::expired("gone")));
    fake.push_list_error(Error::Api(Status::new(500, "InternalError", "broken")));
    fake.push_list(ListPage::new(vec![], "5"));
    fake.push_watch(vec![WatchStep::Hang]);
    let h = Harness::new(fake, |r| r.with_backoff(exact_backoff())).start();

    let requests = h.requests(4).await;
    // The version stays unavailable until a list succeeds.
    assert_eq!(shapes(&requests), r#"list@0 list@"" list@"" watch@5"#);
    assert_eq!(gap(requests[1].at(), requests[2].at()), 0.8);
    assert_eq!(h.errors.lock().as_slice(), ["InternalError 500"]);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_list_without_a_resource_version_is_an_error_and_changes_nothing() {
    let fake = Fake::new();
    fake.push_list(ListPage::new(vec![obj("x", 1)], ""));
    fake.push_list(ListPage::new(vec![obj("a", 1)], "3"));
    fake.push_watch(vec![WatchStep::Hang]);
    let h = Harness::new(fake, |r| r.with_backoff(exact_backoff())).start();

    let requests = h.requests(3).await;
    assert_eq!(shape(&requests[1]), "list@0");
    assert_eq!(
        h.store.ops(),
        [
            Op::Part(vec!["a".into()]),
            Op::PartsDone(vec![], "3".into())
        ]
    );
    assert_eq!(h.errors.lock().len(), 1);
    assert_eq!(gap(requests[0].at(), requests[1].at()), 0.8);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn every_list_sends_the_page_size_at_0_at_a_version_and_on_continue_pages() {
    let fake = Fake::new();
    // The first list at "0" is answered whole (a watch cache ignores the limit) ...
    fake.push_list(ListPage::new(vec![obj("a", 1)], "9"));
    fake.push_watch(vec![event(informer_reflector::WatchEvent::Error(
        Status::expired("old"),
    ))]);
    // ... the relist at 9 is paged by a server without one.
    fake.push_list(ListPage::new(vec![obj("a", 1)], "15").with_continue("t1"));
    fake.push_list(ListPage::new(vec![obj("b", 1)], "15"));
    fake.push_watch(vec![WatchStep::Hang]);
    let h = Harness::new(fake, |r| r).start();

    let requests = h.requests(5).await;
    assert_eq!(
        shapes(&requests),
        r#"list@0 watch@9 list@9 list@"" watch@15"#
    );
    for (i, want_continue) in [(0, None), (2, None), (3, Some("t1"))] {
        let params = list_params(&requests[i]);
        assert_eq!(params.limit, Some(500), "request {i}: {params:?}");
        assert_eq!(params.continue_token.as_deref(), want_continue);
    }
    // A paged list at a version would be an exact read: it says "not older than".
    assert_eq!(
        list_params(&requests[2]).resource_version_match,
        Some(informer_reflector::ResourceVersionMatch::NotOlderThan)
    );
    assert_eq!(list_params(&requests[0]).resource_version_match, None);
    assert_eq!(h.store.content(), [("a".into(), 1), ("b".into(), 1)]);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_paginated_answer_to_a_list_at_0_keeps_relists_paginated() {
    let fake = Fake::new();
    fake.push_list(ListPage::new(vec![obj("a", 1)], "9").with_continue("t"));
    fake.push_list(ListPage::new(vec![obj("b", 1)], "9"));
    fake.push_watch(vec![event(informer_reflector::WatchEvent::Error(
        Status::expired("old"),
    ))]);
    fake.push_list(ListPage::new(vec![obj("b", 1)], "15"));
    fake.push_watch(vec![WatchStep::Hang]);
    let h = Harness::new(fake, |r| r).start();

    let requests = h.requests(5).await;
    let relist = list_params(&requests[3]);
    assert_eq!(relist.resource_version, "9");
    assert_eq!(
        relist.limit,
        Some(500),
        "the server has no watch cache: keep paginating"
    );
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn selectors_go_on_every_list_and_watch() {
    let fake = Fake::new();
    fake.push_list(ListPage::new(vec![], "1"));
    fake.push_watch(vec![WatchStep::Hang]);
    let h = Harness::new(fake, |r| {
        r.with_label_selector("app=web")
            .with_field_selector("spec.nodeName=n1")
    })
    .start();
    let requests = h.requests(2).await;
    let list = list_params(&requests[0]);
    let watch = watch_params(&requests[1]);
    assert_eq!(list.label_selector.as_deref(), Some("app=web"));
    assert_eq!(list.field_selector.as_deref(), Some("spec.nodeName=n1"));
    assert_eq!(watch.label_selector.as_deref(), Some("app=web"));
    assert_eq!(watch.field_selector.as_deref(), Some("spec.nodeName=n1"));
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_store_that_refuses_the_replace_fails_the_cycle() {
    let fake = Fake::new();
    fake.push_list(ListPage::new(vec![obj("", 1)], "4"));
    fake.push_list(ListPage::new(vec![obj("a", 1)], "5"));
    fake.push_watch(vec![WatchStep::Hang]);
    let h = Harness::new(fake, |r| r.with_backoff(exact_backoff())).start();
    let requests = h.requests(3).await;
    // The key function refused the empty name: nothing was stored, the version was not taken.
    assert_eq!(shape(&requests[1]), "list@0");
    assert_eq!(h.store.content(), [("a".into(), 1)]);
    assert_eq!(h.errors.lock().len(), 1);
    h.stop().await;
}

/// A list by page waits between pages while the queue's consumer has more than a page of
/// changes to take, and goes on once it has caught up: decoding never runs far ahead of it.
#[tokio::test(start_paused = true)]
async fn a_list_by_page_waits_for_a_lagging_consumer_between_pages() {
    let fake = Fake::new();
    fake.push_list(ListPage::new(vec![obj("a", 1), obj("b", 1)], "20").with_continue("t1"));
    fake.push_list(ListPage::new(vec![obj("c", 1)], "20"));
    fake.push_watch(vec![WatchStep::Hang]);
    let h = Harness::new(fake, |r| r.with_page_size(2));
    // A page of 2 is the bound: 3 queued changes hold the next page back.
    *h.store.backlog.lock() = Some(3);
    let h = h.start();
    h.requests(1).await;
    tokio::time::sleep(std::time::Duration::from_secs(60)).await;
    assert_eq!(h.fake.requests().len(), 1, "the second page waits");
    assert_eq!(h.store.ops(), [Op::Part(vec!["a".into(), "b".into()])]);

    *h.store.backlog.lock() = Some(2);
    let requests = h.requests(3).await;
    assert_eq!(
        list_params(&requests[1]).continue_token.as_deref(),
        Some("t1")
    );
    assert_eq!(
        h.store.ops(),
        [
            Op::Part(vec!["a".into(), "b".into()]),
            Op::Part(vec!["c".into()]),
            Op::PartsDone(vec![], "20".into())
        ]
    );
    h.stop().await;
}

/// A sink paced by its consumer's backlog is ready only once the consumer has caught up
/// (what a lister-watcher awaits between the chunks of one long response); without pacing it
/// is ready at once.
#[tokio::test(start_paused = true)]
async fn a_paced_sink_is_ready_only_once_its_consumer_has_caught_up() {
    use informer_reflector::ListSink;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    let behind = Arc::new(AtomicBool::new(true));
    let check = {
        let behind = Arc::clone(&behind);
        move |_: &std::task::Waker| behind.load(Ordering::Relaxed)
    };
    let sink: ListSink<'_, Obj> = ListSink::new().pacing(&check);
    let ready = sink.ready();
    tokio::pin!(ready);
    let waited = tokio::time::timeout(Duration::from_secs(60), &mut ready).await;
    assert!(waited.is_err(), "not ready while the consumer is behind");
    behind.store(false, Ordering::Relaxed);
    tokio::time::timeout(Duration::from_secs(1), ready)
        .await
        .expect("ready once it has caught up");

    let unpaced: ListSink<'_, Obj> = ListSink::new();
    tokio::time::timeout(Duration::from_millis(1), unpaced.ready())
        .await
        .expect("ready at once without pacing");
}
