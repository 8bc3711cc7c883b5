//! The live display: progress bars on a terminal, a plain line a second otherwise; and the
//! numbers it shows.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use informers::kube::KubeInformerFactory;

use crate::BoxError;
use crate::informers::Informers;

/// What the world and the reflectors have done so far.
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) changes: AtomicU64,
    pub(crate) faults: AtomicU64,
    pub(crate) watch_errors: AtomicU64,
    pub(crate) relists: AtomicU64,
    /// `pod-count` ConfigMaps the churn drifted behind the controller's back.
    pub(crate) drifts: AtomicU64,
    /// The controller's reconciles, its writes, and its errors (each retried with backoff).
    pub(crate) reconciles: AtomicU64,
    pub(crate) controller_writes: AtomicU64,
    pub(crate) reconcile_errors: AtomicU64,
}

/// Progress bars on a terminal; a plain line a second otherwise.
pub(crate) enum Display {
    Live {
        _multi: MultiProgress,
        sync: ProgressBar,
        status: ProgressBar,
    },
    Plain,
}

impl Display {
    pub(crate) fn new(live: bool, expected: u64) -> Self {
        if !live {
            return Display::Plain;
        }
        let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stdout());
        let sync = multi.add(ProgressBar::new(expected));
        sync.set_style(
            ProgressStyle::with_template("{prefix:>8} [{bar:40}] {pos}/{len} objects {msg}")
                .expect("a valid template")
                .progress_chars("=> "),
        );
        sync.set_prefix("sync");
        let status = multi.add(ProgressBar::new_spinner());
        status.set_style(
            ProgressStyle::with_template("{prefix:>8} {spinner} {msg}").expect("a valid template"),
        );
        status.set_prefix("running");
        Display::Live {
            _multi: multi,
            sync,
            status,
        }
    }

    pub(crate) fn sync_progress(&self, cached: u64, done: bool) {
        match self {
            Display::Live { sync, .. } => {
                sync.set_position(cached);
                if done {
                    sync.finish_with_message("synced");
                }
            }
            Display::Plain => println!(
                "sync: {cached} objects cached{}",
                if done { ", synced" } else { "" }
            ),
        }
    }

    pub(crate) fn status(&self, line: &str) {
        match self {
            Display::Live { status, .. } => {
                status.set_message(line.to_owned());
                status.tick();
            }
            Display::Plain => println!("{line}"),
        }
    }

    pub(crate) fn finish(&self) {
        if let Display::Live { status, .. } = self {
            status.finish();
        }
    }
}

/// Shows sync progress until every informer has synced (or `limit` passes).
pub(crate) async fn show_sync(
    factory: &KubeInformerFactory,
    informers: &Informers,
    display: &Display,
    limit: Duration,
) -> Result<Duration, BoxError> {
    let begun = Instant::now();
    let mut last_plain = Instant::now();
    loop {
        let cached = (informers.pods.lister().len() + informers.configmaps.lister().len()) as u64;
        let synced = informers.pods.has_synced() && informers.configmaps.has_synced();
        if synced {
            display.sync_progress(cached, true);
            break;
        }
        if matches!(display, Display::Live { .. }) || last_plain.elapsed() >= Duration::from_secs(1)
        {
            display.sync_progress(cached, false);
            last_plain = Instant::now();
        }
        if begun.elapsed() > limit {
            let report = factory.wait_for_cache_sync(Some(Duration::ZERO)).await;
            return Err(format!("caches did not sync within {limit:?}: {report}").into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(begun.elapsed())
}

fn status_line(
    elapsed: Duration,
    informers: &Informers,
    counters: &Counters,
    events_per_sec: f64,
) -> String {
    format!(
        "t={:>5.1}s  events/s={:>7.0}  cache: {} pods, {} configmaps  changes={}  faults={}  \
         watch errors={}  relists={}  handler backlog={}  reconciles={}",
        elapsed.as_secs_f64(),
        events_per_sec,
        informers.pods.lister().len(),
        informers.configmaps.lister().len(),
        counters.changes.load(Ordering::Relaxed),
        counters.faults.load(Ordering::Relaxed),
        counters.watch_errors.load(Ordering::Relaxed),
        counters.relists.load(Ordering::Relaxed),
        informers.backlog(),
        counters.reconciles.load(Ordering::Relaxed),
    )
}

/// Shows a status line until `duration` has passed: every `tick` on a terminal, at most once a
/// second otherwise.
pub(crate) async fn show_status(
    display: &Display,
    duration: Duration,
    tick: Duration,
    informers: &Informers,
    counters: &Counters,
) {
    let started = Instant::now();
    let mut last = (Instant::now(), informers.events());
    let mut next_plain = Instant::now() + Duration::from_secs(1);
    while started.elapsed() < duration {
        tokio::time::sleep(tick).await;
        if matches!(display, Display::Plain) && Instant::now() < next_plain {
            continue;
        }
        next_plain = Instant::now() + Duration::from_secs(1);
        let events = informers.events();
        let rate = (events - last.1) as f64 / last.0.elapsed().as_secs_f64();
        last = (Instant::now(), events);
        display.status(&status_line(started.elapsed(), informers, counters, rate));
    }
}
