//! The live display: progress bars on a terminal, a plain line a second otherwise; and the
//! numbers it shows.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use informers::kube::KubeInformerFactory;
use informers::metrics::Metrics;

use crate::BoxError;
use crate::informers::Informers;

/// What the world has done so far (the informers' and the controller's figures come from the
/// metrics registry: [`Scraped`]).
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) changes: AtomicU64,
    pub(crate) faults: AtomicU64,
    /// `pod-count` ConfigMaps the churn drifted behind the controller's back.
    pub(crate) drifts: AtomicU64,
}

/// The figures the display shows, read from one scrape of the metrics registry.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Scraped {
    /// Watch events the reflectors received.
    pub(crate) events: u64,
    /// Watch streams that ended other than by the server's clean close.
    pub(crate) watch_errors: u64,
    /// Lists after a 410 Expired.
    pub(crate) relists: u64,
    /// Notifications buffered for the handlers.
    pub(crate) backlog: u64,
    /// The controller's reconciles, its errors and its writes.
    pub(crate) reconciles: u64,
    pub(crate) reconcile_errors: u64,
    pub(crate) writes: u64,
}

impl Scraped {
    /// Reads the registry's OpenMetrics text.
    pub(crate) fn from(metrics: &Metrics) -> Self {
        let text = metrics.encode();
        // The sum of the samples of `metric` whose labels contain `with` (all of them: ""), a
        // count.
        let sum = |metric: &str, with: &str| -> u64 {
            text.lines()
                .filter_map(|line| {
                    let rest = line.strip_prefix(metric)?;
                    let (series, value) = rest.rsplit_once(' ')?;
                    (series.is_empty() || series.starts_with('{'))
                        .then_some(())
                        .filter(|()| series.contains(with))?;
                    value.parse::<f64>().ok()
                })
                .sum::<f64>()
                .max(0.0) as u64
        };
        Scraped {
            events: sum("informer_reflector_events_total", ""),
            watch_errors: sum("informer_reflector_watch_ends_total", "end=\"error\"")
                + sum("informer_reflector_watch_ends_total", "end=\"broken\"")
                + sum("informer_reflector_watch_ends_total", "end=\"very_short\""),
            relists: sum("informer_reflector_lists_total", "reason=\"expired\""),
            backlog: sum("informer_handler_buffered", ""),
            reconciles: sum("controller_runtime_reconcile_total", ""),
            reconcile_errors: sum("controller_runtime_reconcile_errors_total", ""),
            writes: sum("demo_controller_writes_total", ""),
        }
    }
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
    scraped: &Scraped,
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
        scraped.watch_errors,
        scraped.relists,
        scraped.backlog,
        scraped.reconciles,
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
    metrics: &Metrics,
) {
    let started = Instant::now();
    let mut last = (Instant::now(), Scraped::from(metrics).events);
    let mut next_plain = Instant::now() + Duration::from_secs(1);
    while started.elapsed() < duration {
        tokio::time::sleep(tick).await;
        if matches!(display, Display::Plain) && Instant::now() < next_plain {
            continue;
        }
        next_plain = Instant::now() + Duration::from_secs(1);
        let scraped = Scraped::from(metrics);
        let rate = scraped.events.saturating_sub(last.1) as f64 / last.0.elapsed().as_secs_f64();
        last = (Instant::now(), scraped.events);
        display.status(&status_line(
            started.elapsed(),
            informers,
            counters,
            &scraped,
            rate,
        ));
    }
}
