//! W-HTTP: the client over HTTP (the simulator, or the replay server), list and watch, in the
//! report's process and each side in a process of its own.

use std::process::Command;
use std::time::Duration;

use super::child::{CHILD_LIMIT, output_within};
use super::figures::{Figure, Row, median, secs_in_turns};
use super::{Options, Rows};
use crate::realistic::ManagedFields;
use crate::{replay, w_http, w_inf};

/// W-HTTP client only with each side in a process of its own (`w_http_client`): in one process
/// the two sides alternate, and each run starts on the heap the other side's run left (freed,
/// or given back to the system and faulted in again), which moved either side's list by up to
/// 2× here. `reps` processes a side, alternating the sides (this machine's speed drifts over
/// minutes, and a side run all at once would take one moment's), each making two runs. The
/// second is the warm figure; the first, on a heap that grows from nothing, is reported on its
/// own rows as the cold start (what an informer starting in a new process feels). Medians.
pub(super) fn http_process_rows(opts: &Options, out: &mut Rows<'_>) {
    let s = opts.sizes;
    let [json, protobuf, peer] = process_sides(opts);
    let fig = |r: Option<&Runs>, f: Phase| {
        r.filter(|r| !r.is_empty())
            .map_or(Figure::NotApplicable, |r| {
                Figure::Secs(median(r.iter().map(f).collect()))
            })
    };
    for (which, pick) in [
        (
            "its first run (a cold start)",
            (|r| &r.0) as fn(&(Runs, Runs)) -> &Runs,
        ),
        ("its second run (warm: after the first)", |r| &r.1),
    ] {
        let peer = peer.as_ref().map(pick);
        for (reading, ours) in [
            (", ours reading JSON", &json),
            (", ours reading protobuf", &protobuf),
        ] {
            let ours = ours.as_ref().map(pick);
            let phases: [(&str, Phase, usize); 3] = [
                ("list", |r| r.0, s.listed),
                ("watch", |r| r.1, s.events),
                ("list + watch", |r| r.0 + r.1, s.listed + s.events),
            ];
            for (phase, f, objects) in phases {
                let row = Row::new(
                    "W-HTTP",
                    format!(
                        "client only, each side in its own process, {which}: {phase}{reading} (kube-runtime: JSON)"
                    ),
                    fig(ours, f),
                    fig(peer, f),
                )
                .rate_over(objects);
                out.emit(if phase == "list + watch" {
                    row.target("≥ 2× kube-runtime")
                } else {
                    row
                });
            }
        }
    }
}

/// One process of a side: its first run and the one after it, `(list, watch)` seconds each.
type Runs = Vec<(f64, f64)>;

/// A run's figure in one phase: its list, its watch, or both.
type Phase = fn(&(f64, f64)) -> f64;

/// [`Options::reps`] processes of each side (ours reading JSON, ours reading protobuf,
/// kube-runtime), the sides alternating: their cold runs and their
/// warm runs; `None` for a side whose process failed once (the failure is printed).
fn process_sides(opts: &Options) -> [Option<(Runs, Runs)>; 3] {
    let mut sides = [(); 3].map(|()| Some((Vec::new(), Vec::new())));
    for _ in 0..opts.reps.max(1) {
        for (side, runs) in ["ours", "ours-protobuf", "kube-runtime"]
            .into_iter()
            .zip(&mut sides)
        {
            if let Some((cold, warm)) = runs {
                match process(opts, side) {
                    Some((c, w)) => {
                        cold.extend(c);
                        warm.extend(w);
                    }
                    None => *runs = None,
                }
            }
        }
    }
    sides
}

/// One `w_http_client` process of `side`, making two runs: the cold start, and the warm one.
fn process(opts: &Options, side: &str) -> Option<(Runs, Runs)> {
    let s = opts.sizes;
    let exe = opts.w_http_exe.as_deref()?;
    let (listed, events) = (s.listed.to_string(), s.events.to_string());
    let out = output_within(
        Command::new(exe).args([side, "2", "synthetic", &listed, &events]),
        CHILD_LIMIT,
    )
    .map_err(|e| eprintln!("w_http_client {side}: {e}"))
    .ok()?;
    let parsed: Vec<(f64, f64)> = String::from_utf8_lossy(&out)
        .lines()
        .filter_map(|line| {
            let mut words = line.strip_prefix("run ")?.split(' ');
            Some((words.next()?.parse().ok()?, words.next()?.parse().ok()?))
        })
        .collect();
    let mut parsed = parsed.into_iter();
    let cold = parsed.next().into_iter().collect();
    Some((cold, parsed.collect()))
}

/// A run's time in one phase: its list, its watch, or both.
type RunPart = fn(&w_http::Run) -> Duration;

/// W-HTTP in the report's process: list and watch from the simulator, and client only (from
/// the replay server), with the informer's share when W-INF ran.
pub(super) fn http_rows(opts: &Options, out: &mut Rows<'_>) {
    let s = opts.sizes;
    let rt = w_inf::runtime();
    let data = w_inf::Data::new(s.listed, s.events);
    let encoded = std::sync::Arc::new(replay::Encoded::new(&data).with_protobuf(&data));
    http_protobuf_row(opts, &rt, &data, &encoded, "client only", out);
    for (variant, backend) in [
        ("", w_http::Backend::Simulator),
        ("client only: ", w_http::Backend::Replay(&encoded)),
    ] {
        let (mut ours, mut peer) = (Vec::new(), Vec::new());
        for _ in 0..opts.reps.max(1) {
            ours.push(w_http::ours(&rt, &data, 4, backend, ManagedFields::Kept));
            peer.push(w_http::kube_runtime(&rt, &data, 4, backend, false));
        }
        let med = |runs: &[w_http::Run], f: RunPart| {
            Figure::Secs(median(runs.iter().map(|r| f(r).as_secs_f64()).collect()))
        };
        let phases: [(&str, RunPart, usize); 3] = [
            ("list", |r| r.list, s.listed),
            ("watch", |r| r.watch, s.events),
            ("list + watch", w_http::Run::total, s.listed + s.events),
        ];
        for (phase, f, objects) in phases {
            let row = Row::new(
                "W-HTTP",
                format!("{variant}{phase}"),
                med(&ours, f),
                med(&peer, f),
            )
            .rate_over(objects);
            out.emit(if phase == "list + watch" && !variant.is_empty() {
                row.target("≥ 2× kube-runtime")
            } else {
                row
            });
        }
        let total_secs = med(&ours, w_http::Run::total).value();
        if let (Some(inf), Some(http)) = (out.w_inf_ours, total_secs) {
            let row = Row::new(
                "W-HTTP",
                format!("{variant}the informer's share (W-INF ÷ W-HTTP)"),
                Figure::Percent(100.0 * inf / http),
                Figure::NotApplicable,
            );
            out.emit(row.target("< 10 %"));
        }
    }
}

/// W-HTTP client only, list + watch, with ours reading protobuf (the same objects as protobuf,
/// from the replay server) and ours reading JSON, against kube-runtime reading JSON; realistic
/// pods (`what` says so) without their managed fields on our side, as the factory reads them.
fn http_protobuf_row(
    opts: &Options,
    rt: &tokio::runtime::Runtime,
    data: &w_inf::Data,
    encoded: &std::sync::Arc<replay::Encoded>,
    what: &str,
    out: &mut Rows<'_>,
) {
    let realistic = what.contains("realistic");
    let managed = if realistic {
        ManagedFields::Skipped
    } else {
        ManagedFields::Kept
    };
    let backend = w_http::Backend::Replay(encoded);
    let (mut pb, mut json, mut peer) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..opts.reps.max(1) {
        let total = |r: w_http::Run| r.total().as_secs_f64();
        pb.push(total(w_http::ours_reading(
            rt, data, 4, backend, managed, true,
        )));
        json.push(total(w_http::ours_reading(
            rt, data, 4, backend, managed, false,
        )));
        peer.push(total(w_http::kube_runtime(rt, data, 4, backend, realistic)));
    }
    let objects = data.list.len() + data.events.len();
    for (encoding, ours) in [("protobuf", pb), ("JSON", json)] {
        let row = Row::new(
            "W-HTTP",
            format!("{what}: list + watch, ours reading {encoding} (kube-runtime: JSON)"),
            Figure::Secs(median(ours)),
            Figure::Secs(median(peer.clone())),
        );
        out.emit(row.rate_over(objects).target("≥ 2× kube-runtime"));
    }
}

/// W-HTTP, client only, on realistic pods (a tenth of the synthetic sizes), list + watch: the
/// managed fields kept; stripped (ours: `strip_managed_fields` as the informer's transform;
/// kube-runtime: cleared in the watcher's stream); and, ours only, left out by the decoder
/// (against kube-runtime's stripping, its only way to drop them).
pub(super) fn http_realistic_rows(opts: &Options, out: &mut Rows<'_>) {
    let (listed, events) = (opts.sizes.listed / 10, opts.sizes.events / 10);
    let rt = w_inf::runtime();
    let data = w_inf::Data::realistic(listed, events);
    let encoded = std::sync::Arc::new(replay::Encoded::new(&data).with_protobuf(&data));
    http_protobuf_row(
        opts,
        &rt,
        &data,
        &encoded,
        &format!(
            "client only, realistic pods ({listed} listed, {events} events), ours decoded without managed fields"
        ),
        out,
    );
    let backend = w_http::Backend::Replay(&encoded);
    for (what, managed, strip) in [
        ("as decoded", ManagedFields::Kept, false),
        (
            "strip_managed_fields (kube-runtime: cleared in its stream)",
            ManagedFields::Stripped,
            true,
        ),
        (
            "ours decoded without managed fields (kube-runtime: cleared in its stream)",
            ManagedFields::Skipped,
            true,
        ),
    ] {
        let (ours, peer) = secs_in_turns(
            opts.reps,
            || w_http::ours(&rt, &data, 4, backend, managed).total(),
            || w_http::kube_runtime(&rt, &data, 4, backend, strip).total(),
        );
        let row = Row::new(
            "W-HTTP",
            format!(
                "client only, realistic pods ({listed} listed, {events} events): list + watch, {what}"
            ),
            ours,
            peer,
        );
        out.emit(row.rate_over(listed + events));
    }
}
