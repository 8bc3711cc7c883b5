//! MEM relist: the resident set through a relist over HTTP, ours and kube-runtime.

use super::figures::{Figure, Row, thousands};
use super::mem::sample;
use super::{Options, Rows};
use crate::mem::{Mode, Sample};

/// The target of the relist's peak.
const RELIST_TARGET: &str = "≤ 1.3× the synced cache's RSS";

/// MEM relist ([`crate::relist`]): over HTTP, [`Sizes::mem`](crate::Sizes) pods listed, the
/// watch expired (410), relisted; the resident set once synced, the peak until the relist has
/// reached the cache, and the ratio, for the list in pages of 500 and as one response; ours
/// through `KubeListerWatcher`, kube-runtime's `watcher` (kube-client's decoding) into its
/// store. Each in a process of its own, with a baseline process (runtime, server, client,
/// nothing listed) to tell the cache's own resident set apart.
pub(super) fn mem_relist_rows(opts: &Options, out: &mut Rows<'_>) {
    let n = opts.sizes.mem;
    let base_rss = sample(opts, Mode::RelistBaseline, n).and_then(|s| s.rss_synced);
    out.emit(Row::new(
        "MEM",
        "relist: baseline process RSS (runtime, server, client; nothing listed)",
        base_rss.map_or(Figure::NotApplicable, |b| Figure::Rss(b as f64)),
        Figure::NotApplicable,
    ));
    let pods = thousands(n as f64);
    for (what, ours_mode, peer_mode) in RELISTS {
        let (ours, peer) = (sample(opts, ours_mode, n), sample(opts, peer_mode, n));
        if let Some(s) = ours
            .iter()
            .chain(&peer)
            .find(|s| s.peak_reset == Some(false))
        {
            eprintln!("relist: the peak could not be reset ({s:?}): the peak is the whole run's");
        }
        for (phase, target, measure) in FIGURES {
            let figure = |s: &Option<Sample>| {
                s.as_ref()
                    .and_then(|s| measure(s, base_rss))
                    .unwrap_or(Figure::NotApplicable)
            };
            let row = Row::new(
                "MEM",
                format!("relist {pods} pods, {what}: {phase}"),
                figure(&ours),
                figure(&peer),
            );
            out.emit(row.target(target));
        }
    }
}

/// The relists: how the list comes and how ours applies it, ours' mode of the `mem` binary and
/// kube-runtime's.
const RELISTS: [(&str, Mode, Mode); 8] = [
    (
        "pages of 500",
        Mode::RelistPaged,
        Mode::RelistKubeRuntimePaged,
    ),
    (
        "one whole response",
        Mode::RelistWhole,
        Mode::RelistKubeRuntimeWhole,
    ),
    (
        "pages of 500, nothing changed (the relist brings the same versions)",
        Mode::RelistPagedUnchanged,
        Mode::RelistKubeRuntimePagedUnchanged,
    ),
    (
        "one whole response, nothing changed",
        Mode::RelistWholeUnchanged,
        Mode::RelistKubeRuntimeWholeUnchanged,
    ),
    (
        "pages of 500, ours applied by page (with_relist_by_page)",
        Mode::RelistPagedByPage,
        Mode::RelistKubeRuntimePaged,
    ),
    (
        "one whole response, ours applied by page (a page size at a time)",
        Mode::RelistWholeByPage,
        Mode::RelistKubeRuntimeWhole,
    ),
    (
        "pages of 500, ours on a compact cache, applied by page",
        Mode::RelistPagedCompact,
        Mode::RelistKubeRuntimePaged,
    ),
    (
        "pages of 500, ours on a compact cache, applied by page, nothing changed",
        Mode::RelistPagedCompactUnchanged,
        Mode::RelistKubeRuntimePagedUnchanged,
    ),
];

/// A figure of a relist's sample, given the baseline process's RSS.
type Measure = fn(&Sample, Option<u64>) -> Option<Figure>;

/// The rows of each relist: the phase, its target, its figure.
const FIGURES: [(&str, &str, Measure); 9] = [
    ("RSS synced", "", |s, _| rss(s.rss_synced)),
    ("cache RSS (synced − baseline)", "", |s, base| {
        cache(s, base).map(Figure::Rss)
    }),
    ("peak RSS during the relist", "", |s, _| {
        rss(s.rss_relist_peak)
    }),
    (
        "peak ÷ synced RSS (whole process)",
        RELIST_TARGET,
        |s, _| {
            Some(Figure::Factor(
                s.rss_relist_peak? as f64 / s.rss_synced? as f64,
            ))
        },
    ),
    (
        "(peak − baseline) ÷ cache RSS",
        RELIST_TARGET,
        |s, base| {
            let peak = s.rss_relist_peak? as f64 - base? as f64;
            Some(Figure::Factor(peak / cache(s, base)?))
        },
    ),
    ("RSS once relisted", "", |s, _| rss(s.rss_after_relist)),
    ("live heap synced", "", |s, _| rss(s.heap_synced)),
    ("live heap once relisted", "", |s, _| {
        rss(s.heap_after_relist)
    }),
    ("relist time (expiry → cache relisted)", "", |s, _| {
        s.relist_secs.map(Figure::Secs)
    }),
];

fn rss(bytes: Option<u64>) -> Option<Figure> {
    bytes.map(|b| Figure::Rss(b as f64))
}

/// The cache's resident set: the process's once synced, less the baseline process's.
fn cache(s: &Sample, base: Option<u64>) -> Option<f64> {
    Some(s.rss_synced? as f64 - base? as f64)
}
