//! MEM on realistic pods and projections: heap all-in per view, and the decode time of each.

use std::time::Duration;

use informer_kube::WithoutManagedFields;
use k8s_openapi::api::core::v1::Pod;
use kube::core::PartialObjectMeta;

use super::figures::{Figure, Row, median, median_of, thousands};
use super::mem::{realistic_pods, sample};
use super::{Options, Rows};
use crate::mem::Mode;
use crate::realistic::{
    MetadataAlone, SlimPod, decode_time, realistic_metadata_json, realistic_pod_json,
};

/// MEM on realistic pods ([`crate::realistic`]): heap all-in per cached pod for the full `Pod`,
/// the metadata-only view and the [`SlimPod`] projection, each as decoded and with
/// `strip_managed_fields`; then the decode time per pod of each view, from the bytes of the
/// full pod (medians of [`Options::reps`] runs, at least five); then the same for the synthetic
/// pods.
pub(super) fn mem_projection_rows(opts: &Options, out: &mut Rows<'_>) {
    let n = realistic_pods(&opts.sizes);
    let full_object = realistic_heap_rows(opts, n, out);
    // client-go 1.36 on the same pod (10,000 distinct pods, an indexer with 2 indexes), a
    // fixed anchor measured with Go: there is no Go toolchain on this machine.
    for (what, bytes) in [
        ("as decoded", 27_529.0),
        ("managed fields dropped", 21_857.0),
    ] {
        out.emit(Row::new(
            "MEM",
            format!("realistic pod: heap all-in, client-go 1.36 (anchor), {what}"),
            Figure::bytes(Some(bytes)),
            Figure::NotApplicable,
        ));
    }
    out.emit(Row::new(
        "MEM",
        "realistic pod: heap of one decoded Pod (the object alone)",
        Figure::bytes(full_object),
        Figure::NotApplicable,
    ));
    realistic_decode_rows(opts, n, out);
    synthetic_projection_rows(opts, out);
}

/// What a realistic mode of the `mem` binary caches.
fn label(mode: Mode) -> &'static str {
    match mode {
        Mode::RealisticPod => "Pod",
        Mode::RealisticPodStripped => "Pod, strip_managed_fields",
        Mode::RealisticMetadata => "metadata-only (PartialObjectMeta<Pod>)",
        Mode::RealisticMetadataStripped => {
            "metadata-only (PartialObjectMeta<Pod>), strip_managed_fields"
        }
        Mode::RealisticProjection => "projection (SlimPod: metadata, nodeName, phase)",
        Mode::RealisticProjectionStripped => "projection (SlimPod), strip_managed_fields",
        Mode::RealisticPodSkipped => "Pod, decoded without managed fields",
        Mode::RealisticMetadataSkipped => {
            "metadata-only (PartialObjectMeta<Pod>), decoded without managed fields"
        }
        Mode::RealisticProjectionSkipped => "projection (SlimPod), decoded without managed fields",
        Mode::RealisticPodCompact => {
            "Pod, decoded without managed fields, compact cache (compact JSON at rest, 100 hot)"
        }
        _ => unreachable!("a realistic mode"),
    }
}

/// Heap all-in per cached realistic pod in each view, `n` pods; returns the heap of one full
/// `Pod` (the object alone).
fn realistic_heap_rows(opts: &Options, n: usize, out: &mut Rows<'_>) -> Option<f64> {
    let mut full_object = None;
    for mode in Mode::REALISTIC {
        let s = sample(opts, mode, n);
        if mode == Mode::RealisticPod {
            full_object = s.as_ref().and_then(|s| s.object);
        }
        let row = Row::new(
            "MEM",
            format!(
                "realistic pod ({} pods): heap all-in, {}",
                thousands(n as f64),
                label(mode)
            ),
            Figure::bytes(s.as_ref().and_then(|s| s.all_in)),
            Figure::NotApplicable,
        );
        let projected = matches!(
            mode,
            Mode::RealisticProjection
                | Mode::RealisticProjectionStripped
                | Mode::RealisticProjectionSkipped
        );
        out.emit(match mode {
            _ if projected => row.target("≤ 1,200 B"),
            Mode::RealisticPodCompact => row.target("≤ 13.8 KB"),
            Mode::RealisticPodSkipped => row.target("the default (KubeSource)"),
            _ => row,
        });
    }
    full_object
}

/// The decode time per realistic pod of each view, from the full pod's JSON (and the metadata
/// API's), over `n` pods at the most 2,000.
fn realistic_decode_rows(opts: &Options, n: usize, out: &mut Rows<'_>) {
    let bytes = realistic_pod_json(0);
    let metadata_bytes = realistic_metadata_json(0);
    let runs = opts.reps.max(5);
    let count = n.min(2_000);
    let per_pod = |f: &dyn Fn() -> Duration| {
        let t = median_of(runs, f);
        Figure::per_op(t)
    };
    let strip = |mut p: Pod| {
        p.metadata.managed_fields = None;
        p
    };
    let full = per_pod(&|| decode_time::<Pod>(&bytes, count, |p| p));
    let stripped = per_pod(&|| decode_time::<Pod>(&bytes, count, strip));
    let metadata = per_pod(&|| decode_time::<PartialObjectMeta<Pod>>(&bytes, count, |m| m));
    let metadata_api =
        per_pod(&|| decode_time::<PartialObjectMeta<Pod>>(&metadata_bytes, count, |m| m));
    let slim = per_pod(&|| decode_time::<SlimPod>(&bytes, count, |p| p));
    let skipped = per_pod(&|| decode_time::<WithoutManagedFields<Pod>>(&bytes, count, |p| p));
    let slim_skipped =
        per_pod(&|| decode_time::<WithoutManagedFields<SlimPod>>(&bytes, count, |p| p));
    let size = thousands(bytes.len() as f64);
    for (what, figure) in [
        (format!("Pod ({size} B of JSON)"), full),
        ("Pod, then strip_managed_fields".to_owned(), stripped),
        ("Pod, decoded without managed fields".to_owned(), skipped),
        (
            "PartialObjectMeta<Pod> from the full pod's JSON".to_owned(),
            metadata,
        ),
        (
            format!(
                "PartialObjectMeta<Pod> from the metadata API's JSON ({} B)",
                thousands(metadata_bytes.len() as f64)
            ),
            metadata_api,
        ),
    ] {
        out.emit(Row::new(
            "MEM",
            format!("realistic pod: decode per pod, {what}"),
            figure,
            Figure::NotApplicable,
        ));
    }
    for (what, figure) in [
        ("SlimPod projection", slim),
        (
            "SlimPod projection, decoded without managed fields",
            slim_skipped,
        ),
    ] {
        let row = Row::new(
            "MEM",
            format!(
                "realistic pod: decode per pod, {what}{}",
                speedup(full, figure)
            ),
            figure,
            Figure::NotApplicable,
        );
        out.emit(row.target("≥ 3× faster than Pod").rate_per_op());
    }
}

/// `; N× faster than Pod`, from the decode times of a `Pod` and of a view.
fn speedup(pod: Figure, view: Figure) -> String {
    match (pod.value(), view.value()) {
        (Some(f), Some(s)) if s > 0.0 => format!("; {:.1}× faster than Pod", f / s),
        _ => String::new(),
    }
}

/// The projection of the synthetic pods (the pods of MEM's other rows): heap all-in per
/// cached pod against the full `Pod`'s, and the decode time of each from the same JSON.
fn synthetic_projection_rows(opts: &Options, out: &mut Rows<'_>) {
    let n = opts.sizes.mem;
    let all_in = |mode: Mode| sample(opts, mode, n).and_then(|s| s.all_in);
    let (pod, slim) = (all_in(Mode::Ours), all_in(Mode::OursProjection));
    let smaller = match (pod, slim) {
        (Some(p), Some(s)) if s > 0.0 => format!("; {:.1}× smaller than Pod", p / s),
        _ => String::new(),
    };
    out.emit(Row::new(
        "MEM",
        format!(
            "synthetic pod ({} pods): heap all-in, Pod",
            thousands(n as f64)
        ),
        Figure::bytes(pod),
        Figure::NotApplicable,
    ));
    let row = Row::new(
        "MEM",
        format!(
            "synthetic pod ({} pods): heap all-in, projection (SlimPod){smaller}",
            thousands(n as f64)
        ),
        Figure::bytes(slim),
        Figure::NotApplicable,
    );
    out.emit(row.target("≤ 1,200 B"));
    synthetic_decode_rows(opts, out);
}

/// The decode time per synthetic pod of the full `Pod`, the projection and the metadata alone,
/// from the same JSON.
fn synthetic_decode_rows(opts: &Options, out: &mut Rows<'_>) {
    let bytes = serde_json::to_vec(&crate::workload::pod(7)).expect("a pod serializes");
    let runs = opts.reps.max(5);
    let count = 20_000;
    // The three decodes alternate, so that a drift of the machine's speed falls on each.
    let (mut full, mut slim, mut floor) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        full.push(decode_time::<Pod>(&bytes, count, |p| p).as_secs_f64());
        slim.push(decode_time::<SlimPod>(&bytes, count, |p| p).as_secs_f64());
        floor.push(decode_time::<MetadataAlone>(&bytes, count, |p| p).as_secs_f64());
    }
    let med = |v: Vec<f64>| Figure::per_op(Duration::from_secs_f64(median(v)));
    let (full, slim, floor) = (med(full), med(slim), med(floor));
    out.emit(Row::new(
        "MEM",
        format!(
            "synthetic pod: decode per pod, Pod ({} B of JSON)",
            bytes.len()
        ),
        full,
        Figure::NotApplicable,
    ));
    let row = Row::new(
        "MEM",
        format!(
            "synthetic pod: decode per pod, SlimPod projection{}",
            speedup(full, slim)
        ),
        slim,
        Figure::NotApplicable,
    );
    out.emit(row.target("≥ 3× faster than Pod").rate_per_op());
    out.emit(
        Row::new(
            "MEM",
            format!(
                "synthetic pod: decode per pod, the metadata alone (ObjectMeta, the rest \
                 skipped: the floor of any projection that keeps it){}",
                speedup(full, floor)
            ),
            floor,
            Figure::NotApplicable,
        )
        .rate_per_op(),
    );
}
