//! The report's code paths on tiny sizes: every workload, both sides, the `mem` binary, the
//! table. Figures are not checked (speed is never asserted in a test), only that every row the
//! report promises is there and measured.

use std::io::Write;
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::Duration;

use informer_benches::Sizes;
use informer_benches::mem::{Mode, Sample};
use informer_benches::report::{self, Figure, Options, WORKLOADS};

fn measured(f: Figure) -> bool {
    match f {
        Figure::Ns(v)
        | Figure::Secs(v)
        | Figure::Percent(v)
        | Figure::Count(v)
        | Figure::Rss(v)
        | Figure::Factor(v) => v.is_finite() && v > 0.0,
        Figure::Bytes(v) => v.is_finite(),
        Figure::NotApplicable => false,
    }
}

/// How long the report may go without a new row before [`watchdog`] ends the test process.
/// The tiny run takes seconds; a measuring child is killed at [`report::CHILD_LIMIT`], before.
const SILENT_FOR: Duration = Duration::from_secs(15 * 60);

/// A watchdog for a run of the report: `beat` with each row's name. If none comes for
/// [`SILENT_FOR`], it writes the last one to standard error (directly, past the test harness's
/// capture, which would hold it until a test that never ends has ended) and exits the process
/// with a failure: a hang fails the test, and says where, instead of hanging the whole run.
fn watchdog() -> mpsc::Sender<String> {
    let (beat, beats) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        let mut last = String::from("(no row yet)");
        loop {
            match beats.recv_timeout(SILENT_FOR) {
                Ok(row) => last = row,
                // The run is over.
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    let _ = writeln!(
                        std::io::stderr(),
                        "the report made no row for {SILENT_FOR:?}; the last was: {last}"
                    );
                    std::process::exit(1);
                }
            }
        }
    });
    beat
}

#[test]
fn every_workload_runs_on_tiny_sizes_and_fills_its_rows() {
    let opts = Options {
        sizes: Sizes::tiny(),
        reps: 1,
        only: Vec::new(),
        mem_exe: Some(PathBuf::from(env!("CARGO_BIN_EXE_mem"))),
        w_http_exe: Some(PathBuf::from(env!("CARGO_BIN_EXE_w_http_client"))),
        sync_exes: Some((
            PathBuf::from(env!("CARGO_BIN_EXE_sync_server")),
            PathBuf::from(env!("CARGO_BIN_EXE_sync_client")),
        )),
        w_shard_exe: Some(PathBuf::from(env!("CARGO_BIN_EXE_w_shard"))),
    };
    let beat = watchdog();
    let mut seen = 0;
    let rows = report::run(&opts, &mut |row| {
        seen += 1;
        // The watchdog outlives a failed test only if the process does.
        let _ = beat.send(format!("{} / {}", row.workload, row.phase));
    });
    drop(beat);
    assert_eq!(seen, rows.len());

    let find = |workload: &str, phase: &str| {
        rows.iter()
            .find(|r| r.workload == workload && r.phase.contains(phase))
            .unwrap_or_else(|| panic!("no row {workload} / {phase}"))
    };
    for (workload, phase) in [
        ("W-FIFO-A", "delta_fifo"),
        ("W-FIFO-A", "in_order_fifo"),
        ("W-FIFO-B", "delta_fifo"),
        ("W-FIFO-C", "in_order_fifo"),
        ("W-IDX", "two indexes: by_index namespace"),
        ("W-IDX", "two indexes: by_index node"),
        ("W-WQ", "distinct keys"),
        ("W-WQ", "hot keys"),
    ] {
        let row = find(workload, phase);
        assert!(measured(row.ours), "{row:?}");
        assert_eq!(row.kube_runtime, Figure::NotApplicable, "{row:?}");
    }
    // The cost of metrics, as a percentage (noise can make it negative).
    for (workload, phase) in [
        ("W-WQ", "distinct keys: metrics on"),
        ("W-WQ", "metrics on"),
        ("W-INF", "reflector observed"),
    ] {
        let row = find(workload, phase);
        assert!(
            matches!(row.ours, Figure::Percent(p) if p.is_finite()),
            "{row:?}"
        );
    }
    // Both sides, so a ratio.
    for (workload, phase) in [
        ("W-IDX", "two indexes: add"),
        ("W-IDX", "two indexes: update"),
        ("W-IDX", "two indexes: delete"),
        ("W-IDX", "no indexes: add"),
        ("W-INF", "subscribers"),
        ("W-INF", "stream consumer"),
        ("W-INF", "4 async subscribers (kube-runtime"),
        ("W-INF", "final version"),
        ("W-HTTP", "list"),
        ("W-HTTP", "watch"),
        ("W-HTTP", "list + watch"),
        ("W-HTTP", "realistic pods"),
        (
            "W-HTTP",
            "its own process, its second run (warm: after the first): list",
        ),
        (
            "W-HTTP",
            "its own process, its second run (warm: after the first): watch",
        ),
        (
            "W-HTTP",
            "its own process, its second run (warm: after the first): list + watch",
        ),
        (
            "W-HTTP",
            "its own process, its first run (a cold start): list",
        ),
        (
            "W-HTTP",
            "its own process, its first run (a cold start): watch",
        ),
        (
            "W-HTTP",
            "its own process, its first run (a cold start): list + watch",
        ),
        ("W-HTTP", "list + watch, strip_managed_fields"),
        (
            "W-HTTP",
            "list + watch, ours decoded without managed fields",
        ),
        ("W-CTRL", "cold start (100 reconciles)"),
        ("W-CTRL", "400 updates to quiescence"),
        ("W-CTRL", "reconciles of the 400 updates"),
        ("MEM", "the object itself"),
        ("MEM", "all-in"),
        ("MEM", "RSS"),
    ] {
        let row = find(workload, phase);
        assert!(measured(row.ours) && measured(row.kube_runtime), "{row:?}");
        assert!(row.ratio().is_some(), "{row:?}");
    }
    assert!(measured(find("W-HTTP", "share").ours));
    // No Go toolchain: W-WQ's ratio to client-go is a target the report says it cannot measure.
    for phase in ["distinct keys", "hot keys"] {
        let row = find("W-WQ", phase);
        assert!(row.target.contains("client-go not measured"), "{row:?}");
    }
    assert!(find("W-CTRL", "cold start").target.contains("3×"));
    // W-SHARD: ours alone, for 1, 2 and 4 replicas, the time and the largest replica's heap.
    for replicas in [1, 2, 4] {
        for phase in ["every key reconciled", "informer heap"] {
            let row = rows
                .iter()
                .find(|r| {
                    r.workload == "W-SHARD"
                        && r.phase.starts_with(&format!("{replicas} replica(s)"))
                        && r.phase.contains(phase)
                })
                .unwrap_or_else(|| panic!("no W-SHARD row for {replicas} replicas, {phase}"));
            assert!(measured(row.ours), "{row:?}");
        }
    }
    for phase in [
        "key + slot",
        "index entries",
        "queue leftovers",
        "the rest",
        "metadata-only",
        "realistic pod (30 pods): heap all-in, Pod",
        "heap all-in, Pod, strip_managed_fields",
        "heap all-in, metadata-only (PartialObjectMeta<Pod>), strip",
        "heap all-in, projection (SlimPod: metadata",
        "heap all-in, projection (SlimPod), strip",
        "heap of one decoded Pod",
        "decode per pod, Pod (",
        "decode per pod, SlimPod projection",
        "heap all-in, Pod, decoded without managed fields",
        "heap all-in, projection (SlimPod), decoded without managed fields",
        "decode per pod, Pod, decoded without managed fields",
        "decode per pod, SlimPod projection, decoded without managed fields",
        "synthetic pod (300 pods): heap all-in, Pod",
        "synthetic pod (300 pods): heap all-in, projection (SlimPod)",
        "synthetic pod: decode per pod, Pod (",
        "synthetic pod: decode per pod, SlimPod projection",
        "synthetic pod: decode per pod, the metadata alone",
    ] {
        assert!(measured(find("MEM", phase).ours), "{phase}");
    }
    assert!(find("MEM", "decode per pod, SlimPod").target.contains("3×"));
    assert!(
        find("MEM", "synthetic pod (300 pods): heap all-in, projection")
            .target
            .contains("1,200")
    );
    // The relist over HTTP: both sides, both listings, the ratio against the target.
    assert!(measured(find("MEM", "relist: baseline process RSS").ours));
    for listing in ["pages of 500", "one whole response"] {
        for phase in [
            "RSS synced",
            "cache RSS",
            "peak RSS during the relist",
            "peak ÷ synced RSS",
            "(peak − baseline) ÷ cache RSS",
            "RSS once relisted",
            "live heap synced",
            "live heap once relisted",
            "relist time",
        ] {
            let row = find("MEM", &format!("relist 300 pods, {listing}: {phase}"));
            assert!(measured(row.ours) && measured(row.kube_runtime), "{row:?}");
        }
        let row = find("MEM", &format!("relist 300 pods, {listing}: peak ÷ synced"));
        assert!(row.target.contains("1.3×"), "{row:?}");
        assert!(matches!(row.ours, Figure::Factor(x) if x >= 1.0), "{row:?}");
    }
    // SYNC: every side of ours against kube-runtime, each in fresh processes, in each shape and
    // mode; the anchors only at the sizes they were measured at.
    for shape in ["40 realistic pods", "200 small pods"] {
        for mode in ["list (pages of 500) then watch", "streaming list"] {
            for figure in ["time to synced", "RSS grown by the sync"] {
                for side in [
                    "ours by default",
                    "ours reading JSON",
                    "managed fields kept",
                ] {
                    let row = rows
                        .iter()
                        .find(|r| {
                            r.workload == "SYNC"
                                && r.phase.starts_with(&format!("{shape}, {mode}: {figure}"))
                                && r.phase.contains(side)
                        })
                        .unwrap_or_else(|| panic!("SYNC {shape} {mode} {figure} {side}"));
                    // A resident set may not grow at all for a few pods: measured, not zero.
                    let taken = |f: Figure| f != Figure::NotApplicable;
                    assert!(taken(row.ours) && taken(row.kube_runtime), "{row:?}");
                    if figure == "time to synced" {
                        assert!(measured(row.ours) && measured(row.kube_runtime), "{row:?}");
                    }
                }
            }
        }
    }
    assert!(
        !rows
            .iter()
            .any(|r| r.workload == "SYNC" && r.phase.contains("client-go"))
    );
    // SYNC-WIRE: gzip and h2c against plain HTTP/1.1, on both links, in both modes, timed.
    for link in ["loopback, no limit", "a 100 MB/s link"] {
        for mode in ["list (pages of 500) then watch", "streaming list"] {
            for transport in ["asking for gzip", "HTTP/2 (h2c)"] {
                for side in ["ours by default", "ours reading JSON"] {
                    let phase = format!("200 small pods, {mode}, {link}: time to synced, {side}");
                    let row = rows
                        .iter()
                        .find(|r| {
                            r.workload == "SYNC-WIRE"
                                && r.phase.starts_with(&phase)
                                && r.phase.contains(transport)
                        })
                        .unwrap_or_else(|| panic!("SYNC-WIRE {phase} {transport}"));
                    assert!(measured(row.ours) && measured(row.kube_runtime), "{row:?}");
                }
            }
        }
    }

    let table = report::render(&rows);
    assert_eq!(table.lines().count(), rows.len() + 2);
    assert!(
        table.lines().all(|l| l.matches('|').count() == 9),
        "{table}"
    );
    for w in [
        "W-FIFO-A", "W-WQ", "W-IDX", "W-INF", "W-HTTP", "W-CTRL", "MEM",
    ] {
        assert!(table.contains(w), "{w} missing from\n{table}");
    }
}

#[test]
fn only_selects_by_part_of_a_name_and_reports_unknown_ones() {
    let opts = Options {
        sizes: Sizes::tiny(),
        reps: 1,
        only: vec!["fifo-b".into(), "nonsense".into()],
        mem_exe: None,
        w_http_exe: None,
        sync_exes: None,
        w_shard_exe: None,
    };
    assert_eq!(opts.unknown_names(), ["nonsense"]);
    let selected: Vec<_> = WORKLOADS.iter().filter(|w| opts.selected(w)).collect();
    assert_eq!(selected, [&"w-fifo-b"]);
    let rows = report::run(&opts, &mut |_| {});
    assert!(!rows.is_empty());
    assert!(rows.iter().all(|r| r.workload == "W-FIFO-B"));
}

#[test]
fn without_the_mem_binary_mem_rows_say_not_measured() {
    let opts = Options {
        sizes: Sizes::tiny(),
        reps: 1,
        only: vec!["mem".into()],
        mem_exe: None,
        w_http_exe: None,
        sync_exes: None,
        w_shard_exe: None,
    };
    let rows = report::run(&opts, &mut |_| {});
    assert!(!rows.is_empty());
    // Decode times are measured in the report's own process; every heap and RSS figure needs
    // the mem binary.
    // client-go's figures are fixed anchors (measured with Go), not measurements.
    let (anchors, rows): (Vec<_>, Vec<_>) = rows
        .iter()
        .partition(|r| r.phase.contains("client-go 1.36 (anchor)"));
    assert_eq!(anchors.len(), 2);
    assert!(
        anchors
            .iter()
            .all(|r| matches!(r.ours, Figure::Bytes(b) if b > 20_000.0))
    );
    let (decode, heap): (Vec<_>, Vec<_>) = rows
        .into_iter()
        .partition(|r| r.phase.contains("decode per pod"));
    assert!(
        heap.iter()
            .all(|r| r.ours == Figure::NotApplicable && r.kube_runtime == Figure::NotApplicable)
    );
    assert_eq!(decode.len(), 10);
    assert!(
        decode
            .iter()
            .all(|r| matches!(r.ours, Figure::Ns(ns) if ns > 0.0))
    );
}

#[test]
fn a_mem_sample_round_trips_through_its_json_line() {
    let s = Sample {
        pods: 7,
        rss_peak: Some(4096),
        object: Some(5000.5),
        object_blocks: Some(15.0),
        all_in: Some(5200.0),
        key_and_slot: Some(60.0),
        index_entries: Some(30.0),
        queue_leftovers: Some(70.0),
        ..Sample::default()
    };
    assert_eq!(Sample::from_json(&s.to_json()), Some(s.clone()));
    assert_eq!(s.overhead(), Some(199.5));
    assert_eq!(s.rest(), Some(39.5));
    assert_eq!(Sample::from_json("not json"), None);
    let relisted = Sample {
        pods: 3,
        rss_peak: Some(1 << 20),
        rss_synced: Some(1 << 22),
        rss_relist_peak: Some(1 << 23),
        rss_after_relist: Some(3 << 21),
        peak_reset: Some(true),
        relist_secs: Some(0.25),
        lists: Some(2),
        heap_synced: Some(1 << 21),
        heap_after_relist: Some(1 << 21),
        ..Sample::default()
    };
    assert_eq!(Sample::from_json(&relisted.to_json()), Some(relisted));
}

#[test]
fn the_mem_binary_measures_each_mode_and_refuses_bad_arguments() {
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_mem"));
    for mode in Mode::ALL {
        let s = report::mem_sample(&exe, mode, 50).expect("a sample");
        assert_eq!(s.pods, 50);
        // A pod is several kilobytes of heap in about 15 blocks.
        let object = s.object.expect("the counting allocator");
        assert!(object > 1000.0, "{mode:?}: {s:?}");
        assert!(s.all_in.expect("all-in") >= object * 0.9, "{mode:?}: {s:?}");
    }
    // The projection of the synthetic pod: a fraction of the pod.
    let pod = report::mem_sample(&exe, Mode::Ours, 50).expect("a sample");
    let slim = report::mem_sample(&exe, Mode::OursProjection, 50).expect("a sample");
    let (pod, slim) = (pod.all_in.unwrap(), slim.all_in.unwrap());
    assert!(slim > 200.0 && slim < pod / 2.0, "{slim} against {pod}");
    // Metadata only: a fraction of a pod, all of it cached.
    let meta = report::mem_sample(&exe, Mode::OursMetadata, 50).expect("a sample");
    let object = meta.object.expect("the counting allocator");
    assert!(object > 100.0 && object < 2000.0, "{meta:?}");
    assert!(meta.all_in.expect("all-in") >= object, "{meta:?}");
    let out = std::process::Command::new(&exe)
        .args(["nonsense", "10"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("usage"));
}

#[test]
fn the_mem_binary_measures_realistic_pods_in_every_view() {
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_mem"));
    let all_in = |mode: Mode| {
        let s = report::mem_sample(&exe, mode, 20).expect("a sample");
        assert_eq!(s.pods, 20);
        s.all_in.expect("the counting allocator")
    };
    let [
        pod,
        pod_stripped,
        pod_skipped,
        pod_compact,
        meta,
        meta_stripped,
        meta_skipped,
        slim,
        slim_stripped,
        slim_skipped,
    ] = Mode::REALISTIC.map(all_in);
    // Leaving the managed fields out in the decoder caches what stripping them caches (the
    // same objects, to a few bytes of allocator rounding).
    for (skipped, stripped) in [
        (pod_skipped, pod_stripped),
        (meta_skipped, meta_stripped),
        (slim_skipped, slim_stripped),
    ] {
        assert!(
            (skipped - stripped).abs() < stripped * 0.02,
            "{skipped} against {stripped}"
        );
    }
    // The realistic pod is large, and its managed fields are the largest part of its metadata:
    // stripping them saves more than leaving out the spec and status.
    assert!(pod > 10_000.0, "{pod}");
    assert!(pod_stripped < pod, "{pod_stripped} ≥ {pod}");
    assert!(
        meta < pod && meta_stripped < meta / 2.0,
        "{meta}, {meta_stripped}"
    );
    assert!(
        slim < pod && slim_stripped < slim / 2.0,
        "{slim}, {slim_stripped}"
    );
    assert!(
        slim_stripped < pod_stripped,
        "{slim_stripped} ≥ {pod_stripped}"
    );
    // 20 pods, all of them among the compact cache's 100 kept decoded: each is held decoded
    // and as its compact JSON (about 8 KB, less than the managed fields it was decoded without).
    assert!(
        pod_compact > pod_skipped && pod_compact < pod_skipped + 15_000.0,
        "{pod_compact} against {pod_skipped}"
    );
    // The projection keeps the metadata and two strings more than the metadata-only view.
    assert!(
        slim_stripped > meta_stripped,
        "{slim_stripped} ≤ {meta_stripped}"
    );
}

#[test]
fn a_child_that_outlives_its_limit_is_killed_and_reported() {
    let started = std::time::Instant::now();
    let err = report::output_within(
        std::process::Command::new("sh").args(["-c", "echo going >&2; exec sleep 600"]),
        Duration::from_millis(300),
    )
    .expect_err("killed");
    assert!(err.contains("killed"), "{err}");
    assert!(err.contains("going"), "what it wrote is kept: {err}");
    // Killed, not waited for: far less than the child's own 600 s.
    assert!(started.elapsed() < Duration::from_secs(300), "{err}");
}

#[test]
fn a_childs_output_and_failure_come_back_whole() {
    // More than a pipe's buffer on both streams: neither may block the child.
    let script = "head -c 300000 /dev/zero | tr '\\0' o; head -c 300000 /dev/zero | tr '\\0' e >&2";
    let out = report::output_within(
        std::process::Command::new("sh").args(["-c", script]),
        report::CHILD_LIMIT,
    )
    .expect("it succeeds");
    assert_eq!(out.len(), 300_000);
    assert!(out.iter().all(|&b| b == b'o'));

    let err = report::output_within(
        std::process::Command::new("sh").args(["-c", "echo why >&2; exit 3"]),
        report::CHILD_LIMIT,
    )
    .expect_err("it fails");
    assert!(err.contains("why") && err.contains('3'), "{err}");

    let err = report::output_within(
        &mut std::process::Command::new("/nonexistent/binary"),
        report::CHILD_LIMIT,
    )
    .expect_err("it cannot start");
    assert!(err.contains("/nonexistent/binary"), "{err}");
}
