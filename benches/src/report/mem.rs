//! MEM: the heap and resident set per cached pod, ours and kube-runtime, from the `mem` binary.

use super::child::mem_sample;
use super::figures::{Figure, Row};
use super::{Options, Rows};
use crate::Sizes;
use crate::mem::{Mode, Sample};

/// MEM on synthetic pods: the resident set and the heap per cached pod, ours and kube-runtime,
/// our cache's overhead part by part, the metadata-only informer, and heap blocks per object.
pub(super) fn mem_rows(opts: &Options, out: &mut Rows<'_>) {
    let n = opts.sizes.mem;
    let [ours_base, ours, peer_base, peer] = Mode::ALL.map(|mode| sample(opts, mode, n));
    let rss = |with: &Option<Sample>, without: &Option<Sample>| {
        let (a, b) = (with.as_ref()?.rss_peak?, without.as_ref()?.rss_peak?);
        Some((a as f64 - b as f64) / n as f64)
    };
    out.emit(Row::new(
        "MEM",
        "RSS: peak synced − peak built, per pod",
        Figure::bytes(rss(&ours, &ours_base)),
        Figure::bytes(rss(&peer, &peer_base)),
    ));
    let both: [(&str, Heap, &'static str); 3] = [
        ("the object itself", |s| s.object, ""),
        ("the cache's overhead", Sample::overhead, "< 100 B"),
        ("all-in (object + overhead)", |s| s.all_in, "< 3,000 B"),
    ];
    for (what, f, target) in both {
        let row = Row::new(
            "MEM",
            format!("heap: {what}"),
            heap(&ours, f),
            heap(&peer, f),
        );
        out.emit(row.target(target));
    }
    overhead_rows(&ours, out);
    let metadata = sample(opts, Mode::OursMetadata, n);
    out.emit(
        Row::new(
            "MEM",
            "heap: all-in, metadata-only informer (PartialObjectMeta<Pod>)",
            heap(&metadata, |s| s.all_in),
            Figure::NotApplicable,
        )
        .target("< 3,000 B"),
    );
    let blocks = |s: &Option<Sample>| s.as_ref().and_then(|s| s.object_blocks);
    if let (Some(o), Some(k)) = (blocks(&ours), blocks(&peer)) {
        let mut row = Row::new(
            "MEM",
            "heap blocks per object",
            Figure::NotApplicable,
            Figure::NotApplicable,
        );
        row.phase = format!("heap blocks per object: ours {o:.1}, kube-runtime {k:.1}");
        out.emit(row);
    }
}

/// A heap figure of a sample, bytes per pod.
type Heap = fn(&Sample) -> Option<f64>;

fn heap(s: &Option<Sample>, f: Heap) -> Figure {
    Figure::bytes(s.as_ref().and_then(f))
}

/// Our cache's overhead, part by part (kube-runtime's has no parts to tell apart).
fn overhead_rows(ours: &Option<Sample>, out: &mut Rows<'_>) {
    let parts: [(&str, Heap); 4] = [
        ("key + slot", |s| s.key_and_slot),
        ("index entries (two indexes)", |s| s.index_entries),
        ("queue leftovers (a drained DeltaFifo)", |s| {
            s.queue_leftovers
        }),
        ("the rest (processor, reflector, runtime)", Sample::rest),
    ];
    for (what, f) in parts {
        out.emit(Row::new(
            "MEM",
            format!("heap overhead: {what}"),
            heap(ours, f),
            Figure::NotApplicable,
        ));
    }
}

/// The `mem` binary's sample of `mode` over `pods`: `None` without the binary, or when it
/// failed (the failure is printed).
pub(super) fn sample(opts: &Options, mode: Mode, pods: usize) -> Option<Sample> {
    let exe = opts.mem_exe.as_deref()?;
    mem_sample(exe, mode, pods)
        .map_err(|e| eprintln!("{e}"))
        .ok()
}

/// Realistic pods in MEM: how many (a tenth of the synthetic count: a realistic pod is several
/// times larger).
pub fn realistic_pods(sizes: &Sizes) -> usize {
    (sizes.mem / 10).max(10)
}
