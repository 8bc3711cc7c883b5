//! SYNC: list-and-sync from the simulator in a process of its own (`sync_server`), each client
//! a fresh process (`sync_client`), as [`crate::sync`] defines it; with client-go's figures on a
//! real API server as fixed anchors.

use std::io::{BufRead, BufReader, Lines, Write};
use std::process::{Child, ChildStdout, Command, Stdio};

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

/// Runs `measure` against a `sync_server` of each shape SYNC measures (a fifth of the listed
/// pods if realistic), started before and stopped after, with the `sync_client` binary;
/// `workload` names the rows in what it reports of failures.
pub(super) fn with_servers(
    opts: &Options,
    workload: &str,
    mut measure: impl FnMut(&mut Server, &std::path::Path, Shape, usize),
) {
    let Some((server_exe, client_exe)) = opts.sync_exes.as_ref() else {
        eprintln!("{workload}: no sync_server/sync_client binaries: not measured");
        return;
    };
    for (shape, n) in [
        (Shape::Realistic, opts.sizes.listed / 5),
        (Shape::Small, opts.sizes.listed),
    ] {
        let mut server = match Server::start(server_exe, shape, n) {
            Ok(server) => server,
            Err(e) => {
                eprintln!("{workload}: the {} server did not start: {e}", shape.name());
                continue;
            }
        };
        measure(&mut server, client_exe, shape, n);
        server.stop();
    }
}

/// SYNC rows: for each shape and mode, each of ours against kube-runtime (time to synced,
/// resident set grown by the sync), then ours by default against client-go's anchor.
pub(super) fn sync_rows(opts: &Options, out: &mut Rows<'_>) {
    with_servers(opts, "SYNC", |server, client_exe, shape, n| {
        for mode in [Mode::List, Mode::Streaming] {
            let samples = samples(opts, client_exe, &server.url, &Side::ALL, |side| {
                [side.name(), mode.name(), "plain"]
            });
            emit(out, shape, n, mode, &samples);
        }
    });
}

/// [`Options::reps`] fresh `sync_client` processes for each of `keys`, the keys alternating;
/// `args` gives a key's arguments after the URL (side, mode, transport).
pub(super) fn samples<K: Copy>(
    opts: &Options,
    client_exe: &std::path::Path,
    url: &str,
    keys: &[K],
    args: impl Fn(K) -> [&'static str; 3],
) -> Vec<(K, Vec<Synced>)> {
    let mut samples: Vec<(K, Vec<Synced>)> = keys.iter().map(|&k| (k, Vec::new())).collect();
    for _ in 0..opts.reps.max(1) {
        for (key, syncs) in &mut samples {
            let args = args(*key);
            let run = output_within(Command::new(client_exe).arg(url).args(args), CHILD_LIMIT);
            match run {
                Ok(stdout) => syncs.extend(
                    String::from_utf8_lossy(&stdout)
                        .lines()
                        .find_map(Synced::parse),
                ),
                Err(e) => eprintln!("sync_client {}: {e}", args.join(" ")),
            }
        }
    }
    samples
}

/// The median time to synced and resident set grown of the syncs of `key` in `samples` (not
/// applicable if none).
pub(super) fn figures<K: PartialEq>(samples: &[(K, Vec<Synced>)], key: K) -> (Figure, Figure) {
    let syncs = samples
        .iter()
        .find(|(k, _)| *k == key)
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
}

/// What a row says of a shape and mode: `10,000 realistic pods, streaming list`.
pub(super) fn what(shape: Shape, n: usize, mode: Mode) -> String {
    format!(
        "{} {} pods, {}",
        thousands(n as f64),
        shape.name(),
        match mode {
            Mode::List => "list (pages of 500) then watch",
            Mode::Streaming => "streaming list",
        }
    )
}

/// The rows of one shape and mode.
fn emit(out: &mut Rows<'_>, shape: Shape, n: usize, mode: Mode, samples: &Samples) {
    let what = what(shape, n, mode);
    let figures = |side: Side| figures(samples, side);
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

pub(super) fn side_label(side: Side) -> &'static str {
    match side {
        Side::Ours => "ours by default (protobuf, managed fields left out)",
        Side::OursJson => "ours reading JSON (managed fields left out)",
        Side::OursManagedFields => "ours reading protobuf, managed fields kept",
        Side::OursCompact => "ours by default on the compact cache (100 kept decoded)",
        Side::KubeRuntime => "kube-runtime (JSON, managed fields kept)",
    }
}

/// A `sync_server` process, serving until stopped.
pub(super) struct Server {
    child: Child,
    pub(super) url: String,
    /// Its standard output after the `url` line.
    lines: Lines<BufReader<ChildStdout>>,
}

impl Server {
    /// Starts it and waits for its `url` line.
    pub(super) fn start(exe: &std::path::Path, shape: Shape, n: usize) -> Result<Self, String> {
        let mut child = Command::new(exe)
            .args([shape.name(), &n.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("{}: {e}", exe.display()))?;
        let stdout = child.stdout.take().ok_or("no standard output")?;
        let mut lines = BufReader::new(stdout).lines();
        let url = lines
            .by_ref()
            .map_while(Result::ok)
            .find_map(|line| line.strip_prefix("url ").map(str::to_owned));
        match url {
            Some(url) => Ok(Self { child, url, lines }),
            None => {
                let _ = child.kill();
                let _ = child.wait();
                Err("it ended without printing its URL".into())
            }
        }
    }

    /// Limits its responses to `rate` bytes per second (`None`: no limit), once it says so.
    pub(super) fn set_bandwidth(&mut self, rate: Option<u64>) -> Result<(), String> {
        let line = format!("bandwidth {}", rate.unwrap_or(0));
        let stdin = self.child.stdin.as_mut().ok_or("no standard input")?;
        writeln!(stdin, "{line}")
            .and_then(|()| stdin.flush())
            .map_err(|e| e.to_string())?;
        self.lines
            .by_ref()
            .map_while(Result::ok)
            .find(|answer| *answer == line)
            .map(drop)
            .ok_or_else(|| "it ended without setting the bandwidth".to_owned())
    }

    /// Closes its standard input (it then shuts down) and waits for it.
    pub(super) fn stop(&mut self) {
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
