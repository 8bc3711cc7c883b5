//! Readiness is awaited, not polled: every wait is woken by the change it waits for, gives up
//! when the informer stops, and has a timeout variant.
//!
//! The checks run on tokio's paused clock with nothing else timed in the runtime: a wait that
//! polled on a timer would let the clock jump forward; a wait woken by the change does not.

use crate::common;

use informer::HandlerOptions;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use informer::InformerError;
use tokio::time::Instant;

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn wait_for_sync_is_woken_by_the_sync_itself() {
    let source = ChannelSource::new();
    let _watch = source.open_watch();
    let informer = Arc::new(informer(&source, Duration::ZERO, Kind::DeltaFifo));
    let rec = Recorder::new();
    let registration = informer
        .add_event_handler(rec.clone(), HandlerOptions::new())
        .unwrap();
    let (stop, task) = start(&informer);
    let t0 = Instant::now();
    let waiting = tokio::spawn({
        let informer = Arc::clone(&informer);
        async move { informer.wait_for_sync().await }
    });
    // The list arrives while the wait is parked.
    tokio::task::yield_now().await;
    source.push_list(
        (0..50).map(|i| obj("a", &format!("o{i}"), i + 1)).collect(),
        50,
    );
    assert!(waiting.await.unwrap());
    assert!(registration.wait_for_sync().await);
    assert_eq!(rec.len(), 50, "the handler has handled the whole list");
    assert_eq!(
        Instant::now(),
        t0,
        "no timer ran: the waits were woken by the sync, not by polling"
    );
    stop.cancel();
    task.await.unwrap().unwrap();
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_late_handler_waits_for_its_own_snapshot() {
    let source = ChannelSource::new();
    source.push_list(
        (0..30).map(|i| obj("a", &format!("o{i}"), i + 1)).collect(),
        30,
    );
    let _watch = source.open_watch();
    let informer = Arc::new(informer(&source, Duration::ZERO, Kind::InOrder));
    let (stop, task) = start(&informer);
    assert!(informer.wait_for_sync().await);
    let t0 = Instant::now();
    let late = Recorder::new();
    let registration = informer
        .add_event_handler(late.clone(), HandlerOptions::new())
        .unwrap();
    assert!(registration.wait_for_sync().await);
    assert_eq!(late.len(), 30, "synced means the snapshot has been handled");
    assert_eq!(
        Instant::now(),
        t0,
        "woken by the handler's progress, not a timer"
    );
    stop.cancel();
    task.await.unwrap().unwrap();
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn waits_give_up_when_the_informer_stops_or_the_timeout_passes() {
    let source = ChannelSource::new(); // no list: the informer never syncs
    let informer = Arc::new(informer(&source, Duration::ZERO, Kind::DeltaFifo));
    let registration = informer
        .add_event_handler(Recorder::new(), HandlerOptions::new())
        .unwrap();
    let (stop, task) = start(&informer);
    let t0 = Instant::now();
    assert!(
        !informer
            .wait_for_sync_timeout(Duration::from_secs(60))
            .await
    );
    assert_eq!(
        Instant::now(),
        t0 + Duration::from_secs(60),
        "exactly the timeout"
    );
    assert!(
        !registration
            .wait_for_sync_timeout(Duration::from_secs(5))
            .await
    );

    let informer_wait = tokio::spawn({
        let informer = Arc::clone(&informer);
        async move { informer.wait_for_sync().await }
    });
    let handler_wait = tokio::spawn({
        let registration = registration.clone();
        async move { registration.wait_for_sync().await }
    });
    tokio::task::yield_now().await;
    stop.cancel();
    task.await.unwrap().unwrap();
    assert!(
        !informer_wait.await.unwrap(),
        "the informer stopped unsynced"
    );
    assert!(
        !handler_wait.await.unwrap(),
        "the handler's informer stopped unsynced"
    );
    registration.stopped().await;
}

/// A wait dropped half-way (a `select!`) leaves nothing behind, and a later wait still works.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn waits_are_cancel_safe() {
    let source = ChannelSource::new();
    let _watch = source.open_watch();
    let informer = Arc::new(informer(&source, Duration::ZERO, Kind::DeltaFifo));
    let (stop, task) = start(&informer);
    for _ in 0..3 {
        tokio::select! {
            _ = informer.wait_for_sync() => panic!("nothing listed yet"),
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
    source.push_list(vec![obj("a", "x", 1)], 1);
    assert!(informer.wait_for_sync().await);
    stop.cancel();
    task.await.unwrap().unwrap();
}

/// Registrations were looked up by a per-informer number, so one informer could remove another
/// informer's handler that happened to have the same number.
#[tokio::test(flavor = "current_thread")]
async fn a_registration_of_another_informer_removes_nothing() {
    let source = ChannelSource::new();
    let first = informer(&source, Duration::ZERO, Kind::DeltaFifo);
    let second = informer(&source, Duration::ZERO, Kind::DeltaFifo);
    let of_first = first
        .add_event_handler(Recorder::new(), HandlerOptions::new())
        .unwrap();
    let of_second = second
        .add_event_handler(Recorder::new(), HandlerOptions::new())
        .unwrap();
    assert!(matches!(
        second.remove_event_handler(&of_first),
        Err(InformerError::ForeignRegistration)
    ));
    assert!(
        !of_second.is_stopped(),
        "the second informer's own handler is untouched"
    );
    second.remove_event_handler(&of_second).unwrap();
    tokio::time::timeout(Duration::from_secs(10), of_second.stopped())
        .await
        .expect("a removed handler stops");
    assert!(!of_first.is_stopped());
}
