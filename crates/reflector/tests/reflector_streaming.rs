//! The optional streaming initial list (`sendInitialEvents=true`) and its fallback to a list.

mod common;

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
            Op::Replace(vec!["a".into(), "b".into()], "12".into()),
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
    assert_eq!(gap(requests[0].at(), requests[1].at()), 0.8);
    h.until("synced", |h| h.last_rv() == "6").await;
    assert_eq!(h.store.ops(), [Op::Replace(vec!["a".into()], "6".into())]);
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

/// A `tracing` subscriber that keeps every event's level and fields, as text.
#[derive(Clone, Default)]
struct Captured(std::sync::Arc<parking_lot::Mutex<Vec<(tracing::Level, String)>>>);

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

#[tokio::test(start_paused = true)]
async fn a_refused_streaming_list_warns_once_with_the_servers_message_then_logs_at_debug() {
    const REFUSAL: &str = "etcdserver: RequestWatchProgress is disabled";
    let captured = Captured::default();
    let _guard = tracing::subscriber::set_default(captured.clone());

    let fake = Fake::new();
    for rv in ["5", "6", "7"] {
        // etcd 3.4: the streaming list is answered with one ERROR event.
        fake.push_watch(vec![event(WatchEvent::Error(Status::internal_error(
            REFUSAL,
        )))]);
        fake.push_list(ListPage::new(vec![obj("a", 1)], rv));
        // The watch breaks, so the next cycle tries to stream again.
        fake.push_watch(vec![event(WatchEvent::Error(Status::new(
            403,
            "Forbidden",
            "no",
        )))]);
    }
    fake.push_watch(vec![WatchStep::Hang]);
    let h = Harness::new(fake, |r| streaming(r).with_backoff(exact_backoff())).start();
    let requests = h.requests(10).await;
    assert_eq!(shapes(&requests[..4]), r#"watch@"" list@0 watch@5 watch@5"#);
    assert_eq!(h.reflector.streaming_fallbacks(), 3);

    let logs = captured.0.lock().clone();
    let fallbacks: Vec<_> = logs
        .iter()
        .filter(|(_, text)| text.contains(REFUSAL))
        .collect();
    assert_eq!(fallbacks.len(), 3, "{logs:#?}");
    let warnings: Vec<_> = fallbacks
        .iter()
        .filter(|(level, _)| *level == tracing::Level::WARN)
        .collect();
    assert_eq!(warnings.len(), 1, "exactly one warning: {logs:#?}");
    assert!(
        fallbacks[0].0 == tracing::Level::WARN,
        "the first fallback is the warning: {logs:#?}"
    );
    assert!(
        fallbacks[1..]
            .iter()
            .all(|(level, _)| *level == tracing::Level::DEBUG),
        "{logs:#?}"
    );
    // A second reflector warns again: the rule is once per reflector.
    h.stop().await;
    a_second_reflector_warns_again(&captured, REFUSAL).await;
}

async fn a_second_reflector_warns_again(captured: &Captured, refusal: &str) {
    let fake = Fake::new();
    fake.push_watch(vec![event(WatchEvent::Error(Status::internal_error(
        refusal,
    )))]);
    fake.push_list(ListPage::new(vec![], "1"));
    fake.push_watch(vec![WatchStep::Hang]);
    let h = Harness::new(fake, streaming).start();
    h.requests(3).await;
    let warnings = captured
        .0
        .lock()
        .iter()
        .filter(|(level, text)| *level == tracing::Level::WARN && text.contains(refusal))
        .count();
    assert_eq!(warnings, 2, "one warning per reflector");
    assert_eq!(h.reflector.streaming_fallbacks(), 1);
    h.stop().await;
}
