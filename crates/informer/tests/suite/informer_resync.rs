//! Resyncs on tokio's paused clock: same-version updates go only to handlers whose own period
//! is due.

use crate::common;

use informer::HandlerOptions;
use std::time::Duration;

use common::*;

async fn resyncs_reach_only_handlers_whose_period_is_due(kind: Kind) {
    let source = ChannelSource::new();
    source.push_list(vec![obj("a", "x", 1), obj("a", "y", 2)], 2);
    let _watch = source.open_watch();
    let informer = std::sync::Arc::new(informer(&source, Duration::from_secs(10), kind));
    let every_10s = Recorder::new();
    let every_30s = Recorder::new();
    let never = Recorder::new();
    informer
        .add_event_handler(every_10s.clone(), HandlerOptions::new())
        .unwrap();
    let reg_30 = informer
        .add_event_handler(
            every_30s.clone(),
            HandlerOptions::new().resync_period(Duration::from_secs(30)),
        )
        .unwrap();
    let reg_never = informer
        .add_event_handler(
            never.clone(),
            HandlerOptions::new().resync_period(Duration::ZERO),
        )
        .unwrap();
    let (stop, task) = start(&informer);
    eventually_paused("synced", || informer.has_synced()).await;
    for r in [&every_10s, &every_30s, &never] {
        eventually_paused("initial adds", || r.len() == 2).await;
    }
    let resyncs = |r: &Recorder| {
        r.seen()
            .iter()
            .filter(|s| matches!(s, Seen::Update(_, old, new) if old == new))
            .count()
    };

    for (step, want_10, want_30) in [(1, 2, 0), (2, 4, 0), (3, 6, 2)] {
        tokio::time::advance(Duration::from_secs(10)).await;
        eventually_paused(&format!("resync {step} for the 10 s handler"), || {
            resyncs(&every_10s) == want_10
        })
        .await;
        // Every handler's share of a resync is queued in the same dispatch, before the 10 s
        // handler can see its own: the counts below are final, not a race.
        assert_eq!(
            reg_30.delivered() + reg_30.backlog(),
            2 + want_30,
            "step {step}"
        );
        assert_eq!(
            reg_never.delivered() + reg_never.backlog(),
            2,
            "step {step}"
        );
        eventually_paused(&format!("resync {step} for the 30 s handler"), || {
            resyncs(&every_30s) == want_30
        })
        .await;
    }
    assert_eq!(
        resyncs(&never),
        0,
        "a handler without a period never resyncs"
    );
    assert_eq!(never.len(), 2);
    assert_eq!(
        every_10s.replay(),
        cache(&informer),
        "resyncs change nothing"
    );
    stop.cancel();
    task.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn resyncs_on_delta_fifo() {
    resyncs_reach_only_handlers_whose_period_is_due(Kind::DeltaFifo).await;
}

#[tokio::test(start_paused = true)]
async fn resyncs_on_in_order_fifo() {
    resyncs_reach_only_handlers_whose_period_is_due(Kind::InOrder).await;
}

/// As client-go's reflector: no resync while no watch is open (a relist under way, or waiting
/// for one), and resyncs again once a watch is back.
async fn no_resync_while_the_watch_is_down(kind: Kind) {
    let source = ChannelSource::new();
    source.push_list(vec![obj("a", "x", 1)], 1);
    let watch = source.open_watch();
    let informer = std::sync::Arc::new(informer(&source, Duration::from_secs(10), kind));
    let rec = Recorder::new();
    informer
        .add_event_handler(rec.clone(), HandlerOptions::new())
        .unwrap();
    let (stop, task) = start(&informer);
    eventually_paused("the initial add", || rec.len() == 1).await;
    // The watch expires and the relist waits for a list nobody has queued yet.
    watch.expire();
    for _ in 0..100 {
        if source.lists_asked() == 2 {
            break;
        }
        // Past the backoff before the relist.
        tokio::time::advance(Duration::from_millis(100)).await;
        tokio::task::yield_now().await;
    }
    assert_eq!(source.lists_asked(), 2, "the relist is asked");
    // A resync is a write to the queue, made on this runtime's thread: counted at once.
    let written = informer.stats().queue.written;
    for _ in 0..3 {
        tokio::time::advance(Duration::from_secs(10)).await;
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }
    assert_eq!(
        informer.stats().queue.written,
        written,
        "no resync while the watch is down"
    );
    assert_eq!(rec.len(), 1, "{:?}", rec.seen());
    // The relist comes and a watch opens: resyncs resume.
    source.push_list(vec![obj("a", "x", 1)], 1);
    let _watch = source.open_watch();
    eventually_paused("the watch open again", || source.watches_pending() == 0).await;
    tokio::time::advance(Duration::from_secs(10)).await;
    eventually_paused("a resync", || {
        rec.seen()
            .iter()
            .any(|s| matches!(s, Seen::Update(_, old, new) if old == new))
    })
    .await;
    stop.cancel();
    task.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn no_resync_while_the_watch_is_down_on_delta_fifo() {
    no_resync_while_the_watch_is_down(Kind::DeltaFifo).await;
}

#[tokio::test(start_paused = true)]
async fn no_resync_while_the_watch_is_down_on_in_order_fifo() {
    no_resync_while_the_watch_is_down(Kind::InOrder).await;
}
