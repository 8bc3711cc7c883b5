//! W-INF: the informer from a replayed list and watch to its consumers, ours and kube-runtime.

use k8s_openapi::api::core::v1::Pod;

use super::figures::{Figure, Row, median, overhead_row, secs_in_turns, thousands};
use super::{Options, Rows};
use crate::w_inf;

/// W-INF: on synthetic pods (leaving ours for W-HTTP's share), then on realistic pods.
pub(super) fn inf_rows(opts: &Options, out: &mut Rows<'_>) {
    out.w_inf_ours = Some(synthetic_rows(opts, out));
    inf_realistic_rows(opts, out);
}

/// W-INF's runs on synthetic pods: one figure a repetition, seconds or notifications.
#[derive(Default)]
struct Runs {
    /// Ours, 4 handlers, the reflector not observed.
    metrics_off: Vec<f64>,
    /// Ours, 4 handlers, the reflector observed.
    metrics_on: Vec<f64>,
    /// Ours, 4 handlers.
    ours: Vec<f64>,
    /// Ours, 4 handlers, on the DeltaFifo.
    ours_delta_fifo: Vec<f64>,
    /// Ours, 4 async subscribers.
    ours_subs: Vec<f64>,
    /// Ours, 4 async subscribers allowed to coalesce.
    ours_latest: Vec<f64>,
    /// Notifications those delivered.
    latest_delivered: Vec<f64>,
    /// Notifications those coalesced.
    latest_coalesced: Vec<f64>,
    /// kube-runtime, 4 subscribers.
    subs: Vec<f64>,
    /// kube-runtime, one stream consumer counting for 4.
    consumer: Vec<f64>,
}

/// Runs every side of W-INF [`Options::reps`] times, in turns.
fn measure(opts: &Options, rt: &tokio::runtime::Runtime, data: &w_inf::Data) -> Runs {
    let subscribers = w_inf::Consumers::Subscribers {
        count: 4,
        buffer: w_inf::NO_COALESCING,
    };
    let latest = w_inf::Consumers::Latest {
        count: 4,
        buffer: informer::DEFAULT_BUFFER,
    };
    let handlers = w_inf::Consumers::Handlers {
        count: 4,
        buffer: w_inf::NO_COALESCING,
    };
    let mut runs = Runs::default();
    for _ in 0..opts.reps.max(1) {
        runs.metrics_off.push(
            w_inf::ours_observed(rt, data, handlers, None)
                .elapsed
                .as_secs_f64(),
        );
        let metrics = informer_metrics::Metrics::new();
        let observer = Some(metrics.reflector_observer("w-inf"));
        runs.metrics_on.push(
            w_inf::ours_observed(rt, data, handlers, observer)
                .elapsed
                .as_secs_f64(),
        );
        runs.ours.push(w_inf::ours(rt, data, 4).as_secs_f64());
        let delta_fifo = informer::QueueKind::DeltaFifo;
        runs.ours_delta_fifo
            .push(w_inf::ours_on(rt, data, 4, delta_fifo).as_secs_f64());
        let run = w_inf::ours_with(rt, data, subscribers);
        runs.ours_subs.push(run.elapsed.as_secs_f64());
        let run = w_inf::ours_with(rt, data, latest);
        runs.ours_latest.push(run.elapsed.as_secs_f64());
        runs.latest_delivered.push(run.delivered as f64);
        runs.latest_coalesced.push(run.coalesced as f64);
        let events = data.watcher_events();
        runs.subs
            .push(w_inf::kube_runtime_subscribers(rt, events, 4).as_secs_f64());
        let events = data.watcher_events();
        runs.consumer
            .push(w_inf::kube_runtime_consumer(rt, events, 4).as_secs_f64());
    }
    runs
}

/// W-INF's rows on synthetic pods; returns ours with 4 handlers (seconds).
fn synthetic_rows(opts: &Options, out: &mut Rows<'_>) -> f64 {
    let s = opts.sizes;
    let rt = w_inf::runtime();
    let data = w_inf::Data::new(s.listed, s.events);
    let runs = measure(opts, &rt, &data);
    out.emit(overhead_row(
        "W-INF",
        "4 handlers, reflector observed (every event counted in the registry)".to_owned(),
        runs.metrics_off,
        runs.metrics_on,
    ));
    let ours = median(runs.ours);
    let (ours_subs, ours_latest) = (median(runs.ours_subs), median(runs.ours_latest));
    let (subs, consumer) = (median(runs.subs), median(runs.consumer));
    let total = s.listed + s.events;
    for (phase, ours, peer, target) in [
        (
            "4 handlers (kube-runtime: 4 subscribers)",
            ours,
            subs,
            "0.2 s",
        ),
        (
            "4 handlers (kube-runtime: one stream consumer counting for 4)",
            ours,
            consumer,
            "0.2 s",
        ),
        (
            "4 async subscribers (kube-runtime: 4 subscribers)",
            ours_subs,
            subs,
            "≥ 3× kube-runtime",
        ),
    ] {
        let row = Row::new("W-INF", phase, Figure::Secs(ours), Figure::Secs(peer));
        out.emit(row.target(target).rate_over(total));
    }
    let row = Row::new(
        "W-INF",
        format!(
            "4 async subscribers ÷ 4 handlers (time): {:.2}×",
            ours_subs / ours.max(1e-12)
        ),
        Figure::NotApplicable,
        Figure::NotApplicable,
    );
    out.emit(row.target("≤ 1×"));
    let ours_delta_fifo = median(runs.ours_delta_fifo);
    let row = Row::new(
        "W-INF",
        "4 handlers on the DeltaFifo (kube-runtime: 4 subscribers)",
        Figure::Secs(ours_delta_fifo),
        Figure::Secs(subs),
    );
    out.emit(row.rate_over(total));
    let row = Row::new(
        "W-INF",
        format!(
            "4 handlers, default queue (atomic in-order) ÷ DeltaFifo (time): {:.3}×",
            ours / ours_delta_fifo.max(1e-12)
        ),
        Figure::NotApplicable,
        Figure::NotApplicable,
    );
    out.emit(row.target("≤ 1.05×"));
    let phase = format!(
        "4 async subscribers, default buffer, coalescing allowed: done at every pod's final \
         version; {} of {} notifications delivered, {} coalesced (medians, 4 together; \
         kube-runtime: 4 subscribers, every event)",
        thousands(median(runs.latest_delivered)),
        thousands((4 * total) as f64),
        thousands(median(runs.latest_coalesced)),
    );
    let row = Row::new(
        "W-INF",
        phase,
        Figure::Secs(ours_latest),
        Figure::Secs(subs),
    );
    out.emit(row.rate_over(total));
    ours
}

/// W-INF on realistic pods, with and without stripping the managed fields: ours 4 handlers
/// (with `strip_managed_fields` as the informer's transform), kube-runtime 4 subscribers (with
/// the managed fields cleared in the watcher's stream, `modify`). A tenth of the synthetic
/// sizes: a realistic pod is about 97 KB once decoded.
fn inf_realistic_rows(opts: &Options, out: &mut Rows<'_>) {
    let (listed, events) = (opts.sizes.listed / 10, opts.sizes.events / 10);
    let rt = w_inf::runtime();
    let data = w_inf::Data::realistic(listed, events);
    let handlers = w_inf::Consumers::Handlers {
        count: 4,
        buffer: w_inf::NO_COALESCING,
    };
    let clear: fn(&mut Pod) = |p| {
        p.metadata.managed_fields = None;
    };
    for (what, strip) in [("as decoded", false), ("strip_managed_fields", true)] {
        let modify = if strip { clear } else { |_: &mut _| {} };
        let (ours, peer) = secs_in_turns(
            opts.reps,
            || {
                let transform = strip.then(informer_kube::strip_managed_fields::<Pod>);
                w_inf::ours_transformed(&rt, &data, handlers, None, transform, None).elapsed
            },
            || w_inf::kube_runtime_modified(&rt, data.watcher_events(), 4, modify),
        );
        let row = Row::new(
            "W-INF",
            format!(
                "realistic pods ({listed} listed, {events} events), {what}, 4 handlers (kube-runtime: 4 subscribers)"
            ),
            ours,
            peer,
        );
        out.emit(row.rate_over(listed + events));
    }
}
