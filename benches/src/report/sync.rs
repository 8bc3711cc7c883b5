//! SYNC: list-and-sync from the simulator in a process of its own (`sync_server`), each client
//! a fresh process (`sync_client`), as [`crate::sync`] defines it; with client-go's figures on a
//! real API server as fixed anchors.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use super::figures::{Figure, Row, median, thousands};
use super::{CHILD_LIMIT, Options, Rows, output_within};
use crate::sync::{Mode, Shape, Side, Synced};

/// client-go v0.36.2's default (protobuf) against a real kube-apiserver v1.36.2 on the same
/// class of machine (2 cores, server and client on them), medians of 5: time to synced
/// (seconds) and resident set after sync minus before (MiB). Fixed: there is no Go toolchain
/// here.
const CLIENT_GO: [(Shape, Mode, f64, f64); 4] = [
    (Shape::Realistic, Mode::List, 1.65, 445.0),
    (Shape::Realistic, Mode::Streaming, 1.40, 385.0),
    (Shape::Small, Mode::List, 1.35, 378.0),
    (Shape::Small, Mode::Streaming, 1.09, 228.0),
];

/// The targets against client-go's anchors.
const TIME_TARGET: &str = "≥ 2× client-go's default (anchor)";
const RSS_TARGET: &str = "≤ ½ of client-go's default (anchor)";

/// Every client's figures in one shape and mode: each side's syncs.
type Samples = Vec<(Side, Vec<Synced>)>;

/// SYNC rows: for each shape and mode, each of ours against kube-runtime (time to synced,
/// resident set grown by the sync), then ours by default against client-go's anchor.
pub(super) fn sync_rows(opts: &Options, out: &mut Rows<'_>) {
    let Some((server_exe, client_exe)) = opts.sync_exes.as_ref() else {
        eprintln!("SYNC: no sync_server/sync_client binaries: not measured");
        return;
    };
    for (shape, n) in [
        (Shape::Realistic, opts.sizes.listed / 5),
        (Shape::Small, opts.sizes.listed),
    ] {
        let mut server = match Server::start(server_exe, shape, n) {
            Ok(server) => server,
            Err(e) => {
                eprintln!("SYNC: the {} server did not start: {e}", shape.name());
                continue;
            }
        };
        for mode in [Mode::List, Mode::Streaming] {
            let samples = measure(opts, client_exe, &server.url, mode);
            emit(out, shape, n, mode, &samples);
        }
        server.stop();
    }
}

/// [`Options::reps`] fresh processes of every side, the sides alternating.
fn measure(opts: &Options, client_exe: &std::path::Path, url: &str, mode: Mode) -> Samples {
    let mut samples: Samples = Side::ALL.iter().map(|&s| (s, Vec::new())).collect();
    for _ in 0..opts.reps.max(1) {
        for (side, syncs) in &mut samples {
            let run = output_within(
                Command::new(client_exe).args([url, side.name(), mode.name()]),
                CHILD_LIMIT,
            );
            match run {
                Ok(stdout) => syncs.extend(
                    String::from_utf8_lossy(&stdout)
                        .lines()
                        .find_map(Synced::parse),
                ),
                Err(e) => eprintln!("sync_client {}: {e}", side.name()),
            }
        }
    }
    samples
}

/// The rows of one shape and mode.
fn emit(out: &mut Rows<'_>, shape: Shape, n: usize, mode: Mode, samples: &Samples) {
    let what = format!(
        "{} {} pods, {}",
        thousands(n as f64),
        shape.name(),
        match mode {
            Mode::List => "list (pages of 500) then watch",
            Mode::Streaming => "streaming list",
        }
    );
    let figures = |side: Side| {
        let syncs = samples
            .iter()
            .find(|(s, _)| *s == side)
            .map(|(_, syncs)| syncs.as_slice())
            .unwrap_or_default();
        if syncs.is_empty() {
            return (Figure::NotApplicable, Figure::NotApplicable);
        }
        let time = median(syncs.iter().map(|s| s.time.as_secs_f64()).collect());
        let rss = median(
            syncs
                .iter()
                .map(|s| s.rss_after.saturating_sub(s.rss_before) as f64)
                .collect(),
        );
        (Figure::Secs(time), Figure::Rss(rss))
    };
    let (peer_time, peer_rss) = figures(Side::KubeRuntime);
    for side in [
        Side::Ours,
        Side::OursJson,
        Side::OursManagedFields,
        Side::OursCompact,
    ] {
        let (time, rss) = figures(side);
        let label = side_label(side);
        out.emit(
            Row::new(
                "SYNC",
                format!("{what}: time to synced, {label}"),
                time,
                peer_time,
            )
            .rate_over(n),
        );
        out.emit(Row::new(
            "SYNC",
            format!("{what}: RSS grown by the sync, {label}"),
            rss,
            peer_rss,
        ));
    }
    if let Some(&(_, _, go_time, go_mib)) = CLIENT_GO
        .iter()
        .find(|(s, m, _, _)| *s == shape && *m == mode)
        .filter(|_| n == full_size(shape))
    {
        for (side, who) in [
            (Side::Ours, "ours by default"),
            (Side::OursCompact, "ours on the compact cache"),
        ] {
            let (time, rss) = figures(side);
            let anchor = format!(
                "{who}; right-hand column: client-go's default on a real API server (fixed anchor)"
            );
            out.emit(
                Row::new(
                    "SYNC",
                    format!("{what}: time to synced, {anchor}"),
                    time,
                    Figure::Secs(go_time),
                )
                .target(TIME_TARGET),
            );
            out.emit(
                Row::new(
                    "SYNC",
                    format!("{what}: RSS grown by the sync, {anchor}"),
                    rss,
                    Figure::Rss(go_mib * 1024.0 * 1024.0),
                )
                .target(RSS_TARGET),
            );
        }
    }
}

/// The size the anchors were measured at.
fn full_size(shape: Shape) -> usize {
    match shape {
        Shape::Realistic => 10_000,
        Shape::Small => 50_000,
    }
}

fn side_label(side: Side) -> &'static str {
    match side {
        Side::Ours => "ours by default (protobuf, managed fields left out)",
        Side::OursJson => "ours reading JSON (managed fields left out)",
        Side::OursManagedFields => "ours reading protobuf, managed fields kept",
        Side::OursCompact => "ours by default on the compact cache (100 kept decoded)",
        Side::KubeRuntime => "kube-runtime (JSON, managed fields kept)",
    }
}

/// A `sync_server` process, serving until stopped.
struct Server {
    child: Child,
    url: String,
}

impl Server {
    /// Starts it and waits for its `url` line.
    fn start(exe: &std::path::Path, shape: Shape, n: usize) -> Result<Self, String> {
        let mut child = Command::new(exe)
            .args([shape.name(), &n.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("{}: {e}", exe.display()))?;
        let stdout = child.stdout.take().ok_or("no standard output")?;
        let url = BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .find_map(|line| line.strip_prefix("url ").map(str::to_owned));
        match url {
            Some(url) => Ok(Self { child, url }),
            None => {
                let _ = child.kill();
                let _ = child.wait();
                Err("it ended without printing its URL".into())
            }
        }
    }

    /// Closes its standard input (it then shuts down) and waits for it.
    fn stop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
