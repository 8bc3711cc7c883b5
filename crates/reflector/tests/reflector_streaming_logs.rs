//! What a refused streaming list logs, and at which level.
//!
//! This test is alone in its binary on purpose. `tracing` caches each callsite's interest for the
//! whole process, and while only one subscriber is registered, a callsite first reached on a
//! thread with no subscriber is cached as never interested (tokio-rs/tracing#3611). A test on
//! another thread reaching the fallback's info line first would silence it here; with no other
//! test in the process, no other thread reaches it.

#[path = "suite/common/mod.rs"]
mod common;

use common::*;
use informer_reflector::{ListPage, Status, WatchEvent, WatchStep};
use informer_store::{key_func, meta_namespace_key};

fn streaming(r: TestReflector) -> TestReflector {
    r.with_streaming_list(key_func(|o: &Obj| meta_namespace_key(None, &o.name)))
}

#[tokio::test(start_paused = true)]
async fn a_refused_streaming_list_is_told_once_at_info_with_the_servers_message_then_logs_at_debug()
{
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
    let told: Vec<_> = fallbacks
        .iter()
        .filter(|(level, _)| *level == tracing::Level::INFO)
        .collect();
    assert_eq!(told.len(), 1, "exactly one info line: {logs:#?}");
    assert!(
        fallbacks[0].0 == tracing::Level::INFO,
        "the first fallback is the info line: {logs:#?}"
    );
    assert!(
        fallbacks[1..]
            .iter()
            .all(|(level, _)| *level == tracing::Level::DEBUG),
        "{logs:#?}"
    );
    // A second reflector tells it again: the rule is once per reflector.
    h.stop().await;
    a_second_reflector_tells_it_again(&captured, REFUSAL).await;
}

async fn a_second_reflector_tells_it_again(captured: &Captured, refusal: &str) {
    let fake = Fake::new();
    fake.push_watch(vec![event(WatchEvent::Error(Status::internal_error(
        refusal,
    )))]);
    fake.push_list(ListPage::new(vec![], "1"));
    fake.push_watch(vec![WatchStep::Hang]);
    let h = Harness::new(fake, streaming).start();
    h.requests(3).await;
    let told = captured
        .0
        .lock()
        .iter()
        .filter(|(level, text)| *level == tracing::Level::INFO && text.contains(refusal))
        .count();
    assert_eq!(told, 2, "one info line per reflector");
    assert_eq!(h.reflector.streaming_fallbacks(), 1);
    h.stop().await;
}
