//! The soak's simulator in a process of its own, so that the soak's own process holds the
//! informers alone.
//!
//! The server process is the chaos binary run with `--soak-server` and the soak's settings. It
//! starts the simulator, creates the initial pods, prints `ready <url>`, and then answers one
//! command per line on its standard input, one answer per command on its standard output:
//!
//! | command | answer |
//! |---|---|
//! | `ping` | `pong <ns>`: nanoseconds since the process's time zero |
//! | `churn` | the churn and its faults at the soak's rate for its duration, then the server calmed: `problem <text>` lines, then `churned <writes> <kind>=<n>,…` (`-` for no fault) |
//! | `pods` | `pod <key> <rv> <gold 0/1> <deletion timestamp as JSON, or ->` lines, then `end <revision>` |
//! | `head` | `head <revision>` |
//! | `times` | `time <rv> <ns>` lines (when each revision was written, since the time zero), then `end` |
//! | `rss` | `rss <VmHWM in KiB>` |
//! | `quit` | nothing: the server stops and the process ends (so it does at the end of its input) |
//!
//! Times cross the process boundary as nanoseconds since the server process's time zero; the
//! soak maps that zero onto its own clock with the `ping` of the shortest round trip (both
//! processes read the same monotonic clock, so the mapping is off by at most half that trip).

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, Write};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use informer_apiserver::{ApiServer, Config};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::soak::{Churned, Churner, SoakOptions, peak_rss_kib};
use crate::stack::ServerPod;

/// How long the server process may take to create the initial pods, or to answer.
const ANSWER_BOUND: Duration = Duration::from_secs(600);

/// The server side: runs the simulator and answers the soak's commands until `quit` or the end
/// of standard input. Prints nothing else on standard output.
pub fn serve(options: &SoakOptions) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("building a runtime: {e}"))?;
    let _context = runtime.enter();
    let zero = Instant::now();
    let server = runtime
        .block_on(ApiServer::start(Config::for_tests(Duration::from_secs(1))))
        .map_err(|e| format!("starting the API server: {e}"))?;
    let mut churner = Churner::seed(&server, options)?;
    let mut out = std::io::stdout().lock();
    let io = |e: std::io::Error| format!("writing to the soak: {e}");
    writeln!(out, "ready {}", server.url()).map_err(io)?;
    out.flush().map_err(io)?;
    for line in std::io::stdin().lock().lines() {
        let line = line.map_err(|e| format!("reading the soak's commands: {e}"))?;
        match line.trim() {
            "ping" => writeln!(out, "pong {}", zero.elapsed().as_nanos()).map_err(io)?,
            "churn" => {
                let churned = runtime.block_on(churner.churn(&server, options));
                for p in &churned.problems {
                    writeln!(out, "problem {}", p.replace('\n', " ")).map_err(io)?;
                }
                let faults: Vec<String> = churned
                    .faults
                    .iter()
                    .map(|(kind, n)| format!("{kind}={n}"))
                    .collect();
                let faults = if faults.is_empty() {
                    "-".to_owned()
                } else {
                    faults.join(",")
                };
                writeln!(out, "churned {} {faults}", churned.writes).map_err(io)?;
            }
            "pods" => {
                for p in ServerPod::list(&server)? {
                    let deleting = p.deleting.as_deref().unwrap_or("-");
                    writeln!(
                        out,
                        "pod {} {} {} {deleting}",
                        p.key,
                        p.rv,
                        u8::from(p.gold)
                    )
                    .map_err(io)?;
                }
                writeln!(out, "end {}", server.resource_version()).map_err(io)?;
            }
            "head" => writeln!(out, "head {}", server.resource_version()).map_err(io)?,
            "times" => {
                for (rv, at) in churner.write_times() {
                    let ns = at.saturating_duration_since(zero).as_nanos();
                    writeln!(out, "time {rv} {ns}").map_err(io)?;
                }
                writeln!(out, "end").map_err(io)?;
            }
            "rss" => writeln!(out, "rss {}", peak_rss_kib().unwrap_or(0)).map_err(io)?,
            "quit" => break,
            other => return Err(format!("unknown command {other:?}")),
        }
        out.flush().map_err(io)?;
    }
    runtime.block_on(server.shutdown());
    Ok(())
}

/// The soak's side of a server process.
pub(crate) struct ServerProcess {
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    url: String,
    /// The server process's time zero, on this process's clock.
    zero: Instant,
}

impl ServerProcess {
    /// Starts `exe --soak-server` with the soak's settings, waits until it has created the
    /// initial pods, and maps its clock onto ours.
    pub(crate) async fn spawn(exe: &Path, options: &SoakOptions) -> Result<Self, String> {
        let mut child = Command::new(exe)
            .arg("--soak-server")
            .args(["--objects", &options.objects.to_string()])
            .args(["--duration", &options.duration.as_secs_f64().to_string()])
            .args(["--rate", &options.rate.to_string()])
            .args(["--fault-every", &options.fault_every.to_string()])
            .args(["--soak-seed", &options.seed.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("starting the server process {}: {e}", exe.display()))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err("the server process has no pipes".to_owned());
        };
        let mut process = Self {
            child,
            stdin,
            lines: BufReader::new(stdout).lines(),
            url: String::new(),
            zero: Instant::now(),
        };
        let ready = process.line().await?;
        process.url = ready
            .strip_prefix("ready ")
            .ok_or_else(|| format!("the server process said {ready:?}, not ready"))?
            .to_owned();
        let mut best: Option<(Duration, Instant)> = None;
        for _ in 0..16 {
            let sent = Instant::now();
            let pong = process.request("ping").await?;
            let trip = sent.elapsed();
            let ns = number(&pong, "pong ")?;
            let zero = (sent + trip / 2)
                .checked_sub(Duration::from_nanos(ns))
                .ok_or("the server process's clock is ahead of ours")?;
            if best.is_none_or(|(t, _)| trip < t) {
                best = Some((trip, zero));
            }
        }
        process.zero = best.map_or(process.zero, |(_, zero)| zero);
        Ok(process)
    }

    /// The simulator's URL.
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    async fn send(&mut self, command: &str) -> Result<(), String> {
        let io = |e: std::io::Error| format!("writing to the server process: {e}");
        self.stdin
            .write_all(format!("{command}\n").as_bytes())
            .await
            .map_err(io)?;
        self.stdin.flush().await.map_err(io)
    }

    async fn line(&mut self) -> Result<String, String> {
        match tokio::time::timeout(ANSWER_BOUND, self.lines.next_line()).await {
            Ok(Ok(Some(line))) => Ok(line),
            Ok(Ok(None)) => Err("the server process ended".to_owned()),
            Ok(Err(e)) => Err(format!("reading from the server process: {e}")),
            Err(_) => Err(format!(
                "no answer from the server process in {ANSWER_BOUND:?}"
            )),
        }
    }

    async fn request(&mut self, command: &str) -> Result<String, String> {
        self.send(command).await?;
        self.line().await
    }

    /// Runs the churn (and its faults) to its end, then calms the server.
    pub(crate) async fn churn(&mut self) -> Result<Churned, String> {
        self.send("churn").await?;
        let mut churned = Churned::default();
        loop {
            let line = self.line().await?;
            if let Some(problem) = line.strip_prefix("problem ") {
                churned.problems.push(problem.to_owned());
                continue;
            }
            let rest = line
                .strip_prefix("churned ")
                .ok_or_else(|| format!("unexpected answer to churn: {line:?}"))?;
            let (writes, faults) = rest.split_once(' ').unwrap_or((rest, "-"));
            churned.writes = writes
                .parse()
                .map_err(|_| format!("unexpected answer to churn: {line:?}"))?;
            churned.faults = faults
                .split(',')
                .filter(|f| *f != "-")
                .filter_map(|f| {
                    let (kind, n) = f.split_once('=')?;
                    Some((kind.to_owned(), n.parse().ok()?))
                })
                .collect::<BTreeMap<_, _>>();
            return Ok(churned);
        }
    }

    /// Every pod on the server, and the server's revision.
    pub(crate) async fn pods(&mut self) -> Result<(Vec<ServerPod>, u64), String> {
        self.send("pods").await?;
        let mut pods = Vec::new();
        loop {
            let line = self.line().await?;
            if let Some(head) = line.strip_prefix("end ") {
                let head = head.parse().map_err(|_| format!("bad end: {line:?}"))?;
                return Ok((pods, head));
            }
            let bad = || format!("unexpected pod line: {line:?}");
            let mut parts = line.strip_prefix("pod ").ok_or_else(bad)?.split(' ');
            let (Some(key), Some(rv), Some(gold), Some(deleting)) =
                (parts.next(), parts.next(), parts.next(), parts.next())
            else {
                return Err(bad());
            };
            pods.push(ServerPod {
                key: key.to_owned(),
                rv: rv.parse().map_err(|_| bad())?,
                gold: gold == "1",
                deleting: (deleting != "-").then(|| deleting.to_owned()),
            });
        }
    }

    /// The server's revision.
    pub(crate) async fn head(&mut self) -> Result<u64, String> {
        let line = self.request("head").await?;
        number(&line, "head ")
    }

    /// When each revision was written, on this process's clock.
    pub(crate) async fn write_times(&mut self) -> Result<HashMap<u64, Instant>, String> {
        self.send("times").await?;
        let mut times = HashMap::new();
        loop {
            let line = self.line().await?;
            if line == "end" {
                return Ok(times);
            }
            let bad = || format!("unexpected time line: {line:?}");
            let (rv, ns) = line
                .strip_prefix("time ")
                .and_then(|t| t.split_once(' '))
                .ok_or_else(bad)?;
            let rv: u64 = rv.parse().map_err(|_| bad())?;
            let ns: u64 = ns.parse().map_err(|_| bad())?;
            times.insert(rv, self.zero + Duration::from_nanos(ns));
        }
    }

    /// The server process's peak resident memory, in KiB.
    pub(crate) async fn peak_rss_kib(&mut self) -> Option<u64> {
        let line = self.request("rss").await.ok()?;
        number(&line, "rss ").ok().filter(|&kib| kib > 0)
    }

    /// Stops the server process (killed if it does not end within a few seconds).
    pub(crate) async fn quit(mut self) {
        let _ = self.send("quit").await;
        drop(self.stdin);
        if tokio::time::timeout(Duration::from_secs(10), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}

/// The number after `prefix` in `line`.
fn number(line: &str, prefix: &str) -> Result<u64, String> {
    line.strip_prefix(prefix)
        .and_then(|n| n.trim().parse().ok())
        .ok_or_else(|| format!("expected {prefix}<number>, got {line:?}"))
}
