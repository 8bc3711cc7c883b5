//! Everything time-based, on tokio's paused clock: backoff, its reset, watch timeouts, resync,
//! and stopping.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::*;
use informer_reflector::{BackoffConfig, Error, ListPage, Request, Status, WatchStep};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

fn failing_lists(fake: &Fake, n: usize) {
    for _ in 0..n {
        fake.push_list_error(Error::Api(Status::new(500, "InternalError", "broken")));
    }
}

#[tokio::test(start_paused = true)]
async fn backoff_doubles_from_800ms_with_jitter_up_to_the_30s_cap() {
    let fake = Fake::new();
    failing_lists(&fake, 10);
    let h = Harness::new(fake, |r| r).start();

    let requests = h.requests(10).await;
    let gaps: Vec<f64> = requests
        .windows(2)
        .map(|w| gap(w[0].at(), w[1].at()))
        .collect();
    let nominal = [0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0, 30.0];
    for (g, d) in gaps.iter().zip(nominal) {
        assert!(*g >= d && *g < 2.0 * d, "gap {g} not in [{d}, {})", 2.0 * d);
    }
    // Jitter is applied: not every gap is the nominal value.
    assert!(gaps.iter().zip(nominal).any(|(g, d)| (g - d).abs() > 1e-6));
    // While the server keeps failing, the request rate stays bounded: 10 requests take well over
    // two minutes.
    assert!(gap(requests[0].at(), requests[9].at()) > 140.0);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn the_same_seed_gives_the_same_timeline() {
    let timeline = || async {
        let fake = Fake::new();
        failing_lists(&fake, 6);
        let h = Harness::new(fake, |r| r.with_seed(42)).start();
        let requests = h.requests(6).await;
        let times: Vec<f64> = requests.iter().map(|r| gap(h.started, r.at())).collect();
        h.stop().await;
        times
    };
    assert_eq!(timeline().await, timeline().await);
}

#[tokio::test(start_paused = true)]
async fn backoff_resets_after_two_healthy_minutes() {
    let fake = Fake::new();
    failing_lists(&fake, 4); // delays 0.8, 1.6, 3.2, 6.4 after them
    fake.push_list(ListPage::new(vec![], "10"));
    // A healthy watch for 5 minutes, then the server says the version is gone.
    fake.push_watch(vec![
        WatchStep::Wait(Duration::from_secs(300)),
        event(informer_reflector::WatchEvent::Error(Status::expired(
            "old",
        ))),
    ]);
    failing_lists(&fake, 2);
    fake.push_list(ListPage::new(vec![], "20"));
    fake.push_watch(vec![WatchStep::Hang]);
    let h = Harness::new(fake, |r| r.with_backoff(exact_backoff())).start();

    let requests = h.requests(10).await;
    let gaps: Vec<f64> = requests
        .windows(2)
        .map(|w| gap(w[0].at(), w[1].at()))
        .collect();
    assert_eq!(gaps[..4], [0.8, 1.6, 3.2, 6.4]);
    assert_eq!(gaps[4], 0.0, "list then watch");
    // The 410 is answered by a relist at once; after the healthy watch the sequence starts
    // again at 0.8 s, then goes on doubling.
    assert_eq!(gaps[5], 300.0);
    assert_eq!(gaps[6], 0.8);
    assert_eq!(gaps[7], 1.6);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn backoff_does_not_reset_while_the_server_keeps_failing() {
    let fake = Fake::new();
    failing_lists(&fake, 12);
    let h = Harness::new(fake, |r| r.with_backoff(exact_backoff())).start();
    let requests = h.requests(12).await;
    let last = gap(requests[10].at(), requests[11].at());
    assert_eq!(last, 30.0, "stays at the cap after minutes of failures");
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn backoff_is_configurable() {
    let fake = Fake::new();
    failing_lists(&fake, 4);
    let backoff = BackoffConfig {
        initial: Duration::from_millis(10),
        factor: 3.0,
        cap: Duration::from_millis(50),
        jitter: 0.0,
        reset_after: Duration::from_secs(1),
    };
    let h = Harness::new(fake, |r| r.with_backoff(backoff)).start();
    let requests = h.requests(4).await;
    let gaps: Vec<f64> = requests
        .windows(2)
        .map(|w| gap(w[0].at(), w[1].at()))
        .collect();
    for (g, want) in gaps.iter().zip([0.01, 0.03, 0.05]) {
        assert!((g - want).abs() < 1e-9, "{gaps:?}");
    }
    h.stop().await;
}

fn watch_timeouts(requests: &[Request]) -> Vec<u64> {
    requests
        .iter()
        .filter_map(|r| match r {
            Request::Watch { params, .. } => Some(params.timeout.unwrap().as_secs()),
            Request::List { .. } => None,
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn each_watch_asks_for_a_random_timeout_between_min_and_twice_min() {
    let fake = Fake::new();
    fake.push_list(ListPage::new(vec![], "1"));
    for _ in 0..20 {
        fake.push_watch(vec![WatchStep::Wait(Duration::from_secs(2))]);
    }
    let h = Harness::new(fake, |r| r).start();
    let timeouts = watch_timeouts(&h.requests(21).await);
    assert!(
        timeouts.iter().all(|t| (300..600).contains(t)),
        "{timeouts:?}"
    );
    let distinct: std::collections::BTreeSet<_> = timeouts.iter().collect();
    assert!(distinct.len() > 5, "random, not fixed: {timeouts:?}");
    h.stop().await;

    let fake = Fake::new();
    fake.push_list(ListPage::new(vec![], "1"));
    for _ in 0..10 {
        fake.push_watch(vec![WatchStep::Wait(Duration::from_secs(2))]);
    }
    let h = Harness::new(fake, |r| r.with_min_watch_timeout(Duration::from_secs(10))).start();
    let timeouts = watch_timeouts(&h.requests(11).await);
    assert!(
        timeouts.iter().all(|t| (10..20).contains(t)),
        "{timeouts:?}"
    );
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn resync_fires_on_its_period_while_watching() {
    let fake = Fake::new();
    fake.push_list(ListPage::new(vec![obj("a", 1)], "1"));
    fake.push_watch(vec![WatchStep::Hang]);
    let h = Harness::new(fake, |r| r.with_resync_period(Duration::from_secs(30))).start();
    h.requests(2).await;
    tokio::time::sleep(Duration::from_secs(95)).await;
    let resyncs: Vec<f64> = h
        .store
        .op_times(|op| *op == Op::Resync)
        .iter()
        .map(|t| gap(h.started, *t))
        .collect();
    assert_eq!(resyncs, [30.0, 60.0, 90.0]);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn should_resync_can_veto_a_resync() {
    let fake = Fake::new();
    fake.push_list(ListPage::new(vec![], "1"));
    fake.push_watch(vec![WatchStep::Hang]);
    let allow = Arc::new(AtomicBool::new(false));
    let gate = allow.clone();
    let h = Harness::new(fake, |r| {
        r.with_resync_period(Duration::from_secs(10))
            .with_should_resync(move || gate.load(Ordering::SeqCst))
    })
    .start();
    h.requests(2).await;
    tokio::time::sleep(Duration::from_secs(25)).await;
    assert!(h.store.op_times(|op| *op == Op::Resync).is_empty());
    allow.store(true, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(10)).await;
    let resyncs = h.store.op_times(|op| *op == Op::Resync);
    assert_eq!(resyncs.len(), 1);
    assert_eq!(gap(h.started, resyncs[0]), 30.0);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_failed_resync_ends_the_watch_and_relists_after_backoff() {
    let fake = Fake::new();
    fake.push_list(ListPage::new(vec![], "1"));
    fake.push_watch(vec![added("a", 1, "2"), WatchStep::Hang]);
    fake.push_list(ListPage::new(vec![obj("a", 1)], "2"));
    fake.push_watch(vec![WatchStep::Hang]);
    let h = Harness::new(fake, |r| {
        r.with_resync_period(Duration::from_secs(10))
            .with_backoff(exact_backoff())
    })
    .start();
    *h.store.fail_resync.lock() = true;
    let requests = h.requests(3).await;
    assert_eq!(shape(&requests[2]), "list@2");
    assert_eq!(gap(requests[1].at(), requests[2].at()), 10.8);
    assert_eq!(h.errors.lock().len(), 1);
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn no_resync_without_a_period() {
    let fake = Fake::new();
    fake.push_list(ListPage::new(vec![], "1"));
    fake.push_watch(vec![WatchStep::Hang]);
    let h = Harness::new(fake, |r| r.with_resync_period(Duration::ZERO)).start();
    h.requests(2).await;
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert!(h.store.op_times(|op| *op == Op::Resync).is_empty());
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn stops_promptly_while_backing_off() {
    let fake = Fake::new();
    failing_lists(&fake, 12);
    let h = Harness::new(fake, |r| r).start();
    // After eight failures the reflector waits at least 25.6 s.
    h.requests(8).await;
    let before = tokio::time::Instant::now();
    let reflector = h.reflector.clone();
    h.stop().await;
    assert_eq!(
        tokio::time::Instant::now(),
        before,
        "no virtual time passed while stopping"
    );
    assert!(Arc::strong_count(&reflector) == 1, "the run task is gone");
}

#[tokio::test(start_paused = true)]
async fn stops_promptly_while_watching_or_listing() {
    let fake = Fake::new();
    fake.push_list(ListPage::new(vec![], "1"));
    fake.push_watch(vec![WatchStep::Hang]);
    let h = Harness::new(fake, |r| r).start();
    h.requests(2).await;
    h.stop().await;

    // A list that never answers.
    let h = Harness::new(Fake::new(), |r| r).start();
    h.requests(1).await;
    h.stop().await;
}

#[tokio::test(start_paused = true)]
async fn stopping_before_start_returns_at_once() {
    let h = Harness::new(Fake::new(), |r| r);
    h.stop.cancel();
    h.reflector.run(h.stop.clone()).await;
    assert!(h.fake.requests().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_second_run_while_one_is_going_returns_at_once() {
    let fake = Fake::new();
    fake.push_list(ListPage::new(vec![obj("a", 1)], "1"));
    fake.push_watch(vec![WatchStep::Hang]);
    let h = Harness::new(fake, |r| r).start();
    h.requests(2).await;
    // The second run returns without a request, and the first goes on.
    tokio::time::timeout(
        Duration::from_secs(1),
        h.reflector.run(CancellationToken::new()),
    )
    .await
    .expect("returns at once");
    assert_eq!(h.fake.requests().len(), 2);
    let reflector = h.reflector.clone();
    h.stop().await;
    // Once stopped, it can run again.
    let stop = CancellationToken::new();
    stop.cancel();
    reflector.run(stop).await;
}

/// A server that restarts five times, 45 s apart, each time down for 3 s.
///
/// While it is down every request is refused (connection refused). While it is up, lists answer
/// at once and a watch stays open until the next outage begins, when it ends with the 503 a
/// server shutting down sends.
struct RestartingServer {
    t0: Instant,
    /// `(is_list, at, answered)` for every request.
    requests: parking_lot::Mutex<Vec<(bool, Instant, bool)>>,
}

const OUTAGES: u32 = 5;
const OUTAGE_EVERY: Duration = Duration::from_secs(45);
const OUTAGE_LASTS: Duration = Duration::from_secs(3);

impl RestartingServer {
    fn outage(&self, k: u32) -> (Instant, Instant) {
        let start = self.t0 + OUTAGE_EVERY * (k + 1);
        (start, start + OUTAGE_LASTS)
    }

    fn is_down(&self, at: Instant) -> bool {
        (0..OUTAGES).any(|k| {
            let (start, end) = self.outage(k);
            at >= start && at < end
        })
    }

    fn next_outage_after(&self, at: Instant) -> Option<Instant> {
        (0..OUTAGES).map(|k| self.outage(k).0).find(|s| *s > at)
    }

    fn record(&self, is_list: bool) -> Result<Instant, Error> {
        let now = Instant::now();
        let up = !self.is_down(now);
        self.requests.lock().push((is_list, now, up));
        if up {
            Ok(now)
        } else {
            Err(Error::ConnectionRefused(
                "tcp connect error: connection refused".into(),
            ))
        }
    }
}

impl informer_reflector::ListerWatcher<Obj> for RestartingServer {
    fn list(
        &self,
        _: &informer_reflector::ListParams,
    ) -> impl std::future::Future<Output = Result<ListPage<Obj>, Error>> + Send {
        let answer = self.record(true).map(|now| {
            let rv = (now - self.t0).as_millis() + 1;
            ListPage::new(vec![obj("a", 1)], rv.to_string())
        });
        async move { answer }
    }

    fn watch(
        &self,
        _: &informer_reflector::WatchParams,
    ) -> impl std::future::Future<Output = Result<informer_reflector::WatchStream<Obj>, Error>> + Send
    {
        use futures::StreamExt;
        let answer = self
            .record(false)
            .map(|now| match self.next_outage_after(now) {
                Some(at) => futures::stream::once(async move {
                    tokio::time::sleep_until(at).await;
                    Ok(informer_reflector::WatchEvent::Error(Status::new(
                        503,
                        "ServiceUnavailable",
                        "apiserver is shutting down",
                    )))
                })
                .boxed(),
                None => futures::stream::pending().boxed(),
            });
        async move { answer }
    }
}

#[tokio::test(start_paused = true)]
async fn every_restart_is_followed_within_two_seconds_of_the_server_being_back() {
    let server = Arc::new(RestartingServer {
        t0: Instant::now(),
        requests: parking_lot::Mutex::new(Vec::new()),
    });
    let store = Arc::new(RecordingStore::new());
    let reflector = Arc::new(
        informer_reflector::Reflector::new(server.clone(), store.clone())
            .with_seed(7)
            .with_watch_error_handler(|_| {}),
    );
    let stop = CancellationToken::new();
    let task = tokio::spawn({
        let (reflector, stop) = (reflector.clone(), stop.clone());
        async move { reflector.run(stop).await }
    });
    // On the paused clock this runs the whole scenario: five outages, then a quiet minute.
    tokio::time::sleep(OUTAGE_EVERY * (OUTAGES + 1) + Duration::from_secs(60)).await;
    stop.cancel();
    task.await.unwrap();

    let requests = server.requests.lock().clone();
    let mut report = Vec::new();
    for k in 0..OUTAGES {
        let (start, end) = server.outage(k);
        let lists: Vec<(Instant, bool)> = requests
            .iter()
            .filter(|(is_list, at, _)| *is_list && *at >= start)
            .map(|(_, at, ok)| (*at, *ok))
            .collect();
        let first_retry = lists[0].0 - start;
        let relisted = lists
            .iter()
            .find(|(_, ok)| *ok)
            .expect("a relist once the server is back")
            .0;
        let stale_after_back = relisted - end;
        report.push((first_retry.as_secs_f64(), stale_after_back.as_secs_f64()));
        // A server shutting down (503) and refusing connections is not ready: the first retry
        // waits the first delay of the readiness cadence, jittered: [250 ms, 312.5 ms).
        assert!(
            first_retry >= Duration::from_millis(250)
                && first_retry < Duration::from_micros(312_500),
            "outage {k}: first retry after {first_retry:?}; all: {report:?}"
        );
        // The cadence (250 ms × 1.5 a step, at most 1.6 s, each up to 25 % longer) reaches
        // the server within 2 s of it being back, the backoff untouched.
        assert!(
            stale_after_back <= Duration::from_secs(2),
            "outage {k}: relisted {stale_after_back:?} after the server was back; all: {report:?}"
        );
    }
    // Every failed list was answered by the outage, none while the server was up.
    assert!(
        requests
            .iter()
            .all(|(_, at, ok)| *ok != server.is_down(*at))
    );
}

/// A server that answers 503 (not ready) is asked again on the readiness cadence, at most 2 s
/// apart and without stepping the backoff, for a minute; after that it is a failing server and
/// the backoff protects it, from its first delay.
#[tokio::test(start_paused = true)]
async fn a_server_not_ready_is_polled_for_a_minute_then_the_backoff_protects_it() {
    let fake = Fake::new();
    const LISTS: usize = 45;
    for _ in 0..LISTS {
        fake.push_list_error(Error::Api(Status::new(
            503,
            "ServiceUnavailable",
            "starting",
        )));
    }
    let h = Harness::new(fake, |r| r.with_backoff(exact_backoff())).start();
    let requests = h.requests(LISTS).await;
    let t0 = requests[0].at();
    let (mut polled, mut backed_off) = (Vec::new(), Vec::new());
    for w in requests.windows(2) {
        let (since, waited) = (gap(t0, w[0].at()), gap(w[0].at(), w[1].at()));
        if since <= 60.0 {
            polled.push(waited);
        } else {
            backed_off.push(waited);
        }
    }
    assert!(
        polled.len() > 25,
        "polled {} times in a minute",
        polled.len()
    );
    assert!(polled.iter().all(|g| *g <= 2.0), "{polled:?}");
    assert_eq!(backed_off[..4], [0.8, 1.6, 3.2, 6.4], "{backed_off:?}");
    h.stop().await;
}
