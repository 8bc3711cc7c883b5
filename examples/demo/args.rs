//! The command line, and the run's settings with their defaults filled in.

use std::io::IsTerminal;
use std::time::Duration;

use clap::Parser;

/// Shared informers against a busy, failing API server, checked object by object at the end.
#[derive(Parser, Debug)]
#[command(
    name = "demo",
    about,
    long_about = "Runs a shared informer factory (pod and configmap informers, the namespace \
                  and node indexes, three handlers) and, on the same informers, a controller \
                  keeping a pod-count ConfigMap per namespace, against the embedded API server \
                  simulator while it churns objects and injects faults (dropped watches, 410 \
                  Expired after compaction, restarts). Ends by checking every cache against the \
                  server, object by object at the same resourceVersion, and every pod-count; \
                  exits with status 1 on any difference."
)]
pub(crate) struct Args {
    /// Run read-only against the cluster of the current kubeconfig (no churn, no faults).
    #[arg(long)]
    pub(crate) cluster: bool,
    /// A few seconds on a small world (500 pods, 10 namespaces, 50 nodes): for CI.
    #[arg(long)]
    pub(crate) short: bool,
    /// Pods to start with [default: 10000; --short: 500].
    #[arg(long)]
    pub(crate) pods: Option<usize>,
    /// Namespaces the pods and configmaps spread over [default: 100; --short: 10].
    #[arg(long)]
    pub(crate) namespaces: Option<usize>,
    /// Nodes the pods are scheduled on (created as Node objects too) [default: 1000; --short: 50].
    #[arg(long)]
    pub(crate) nodes: Option<usize>,
    /// Configmaps per namespace [default: 5].
    #[arg(long)]
    pub(crate) configmaps: Option<usize>,
    /// Changes per second while churning: half pod updates, a quarter creates, a quarter
    /// deletes, plus configmap updates [default: 1000; --short: 300].
    #[arg(long)]
    pub(crate) rate: Option<u32>,
    /// Seconds of churn (with --cluster: of watching) [default: 30; --short: 4].
    #[arg(long)]
    pub(crate) duration: Option<f64>,
    /// Seconds between injected faults, cycling through: drop every watch; compact the history
    /// and drop every watch (410 Expired, relist); restart the server [default: 5; --short: 1].
    #[arg(long)]
    pub(crate) fault_every: Option<f64>,
    /// Inject no faults.
    #[arg(long)]
    pub(crate) no_faults: bool,
    /// Serve the metrics registry on this port while the demo runs: /metrics (OpenMetrics),
    /// /readyz and /livez on 127.0.0.1.
    #[arg(long)]
    pub(crate) metrics_port: Option<u16>,
    /// Print a plain line every second instead of live progress bars (the default when stdout
    /// is not a terminal).
    #[arg(long)]
    pub(crate) plain: bool,
}

/// The run's settings, defaults filled in.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) pods: usize,
    pub(crate) namespaces: usize,
    pub(crate) nodes: usize,
    pub(crate) configmaps: usize,
    pub(crate) rate: u32,
    pub(crate) duration: Duration,
    pub(crate) fault_every: Option<Duration>,
    pub(crate) live: bool,
    pub(crate) metrics_port: Option<u16>,
}

impl Settings {
    pub(crate) fn from(args: &Args) -> Self {
        let short = args.short;
        let pick = |given: Option<f64>, full: f64, small: f64| {
            given.unwrap_or(if short { small } else { full })
        };
        let fault_every = pick(args.fault_every, 5.0, 1.0);
        Settings {
            pods: args.pods.unwrap_or(if short { 500 } else { 10_000 }),
            namespaces: args
                .namespaces
                .unwrap_or(if short { 10 } else { 100 })
                .max(1),
            nodes: args.nodes.unwrap_or(if short { 50 } else { 1000 }).max(1),
            configmaps: args.configmaps.unwrap_or(5),
            rate: args.rate.unwrap_or(if short { 300 } else { 1000 }),
            duration: Duration::from_secs_f64(pick(args.duration, 30.0, 4.0).max(0.0)),
            fault_every: (!args.no_faults && !args.cluster && fault_every > 0.0)
                .then(|| Duration::from_secs_f64(fault_every)),
            live: !args.plain && std::io::stdout().is_terminal(),
            metrics_port: args.metrics_port,
        }
    }
}
