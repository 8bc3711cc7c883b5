//! The informers stack at work: a shared informer factory keeps pod and configmap caches in
//! step with a busy API server that keeps failing, then proves it.
//!
//! By default the demo starts the embedded API server simulator with 10,000 pods in 100
//! namespaces on 1,000 nodes, creates, updates and deletes pods and configmaps at a steady rate,
//! and on a schedule drops every watch, compacts the history under the watchers (so they come
//! back to `410 Expired` and relist) and restarts the server. A `KubeInformerFactory` runs pod
//! and configmap informers with the `namespace` and `node` indexes and three handlers. At the
//! end it checks, object by object, that every cache holds exactly what the server holds at the
//! same resourceVersion, that each handler's view agrees, and that the `node` index is exact —
//! and exits non-zero if anything differs.
//!
//! ```sh
//! cargo run --release --example demo              # the full run, about 30 s
//! cargo run --release --example demo -- --short   # a few seconds on a small world (CI)
//! cargo run --release --example demo -- --cluster # read-only, against your kubeconfig
//! cargo run --release --example demo -- --help
//! ```

use std::collections::{BTreeMap, HashMap};
use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use informer_examples::{node_index, node_of, pod};
use informers::apiserver::{ApiServer, Config};
use informers::k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod};
use informers::kube::{
    CacheCheck, KubeInformerFactory, KubeSource, Snapshot, check_at_same_version, informer_snapshot,
};
use informers::kube_client::{self, Resource, ResourceExt};
use informers::prelude::*;
use informers::reflector::BackoffConfig;
use parking_lot::Mutex;

/// Shared informers against a busy, failing API server, checked object by object at the end.
#[derive(Parser, Debug)]
#[command(
    name = "demo",
    about,
    long_about = "Runs a shared informer factory (pod and configmap informers, the namespace \
                  and node indexes, three handlers) against the embedded API server simulator \
                  while it churns objects and injects faults (dropped watches, 410 Expired after \
                  compaction, restarts). Ends by checking every cache against the server, object \
                  by object at the same resourceVersion; exits with status 1 on any difference."
)]
struct Args {
    /// Run read-only against the cluster of the current kubeconfig (no churn, no faults).
    #[arg(long)]
    cluster: bool,
    /// A few seconds on a small world (500 pods, 10 namespaces, 50 nodes): for CI.
    #[arg(long)]
    short: bool,
    /// Pods to start with [default: 10000; --short: 500].
    #[arg(long)]
    pods: Option<usize>,
    /// Namespaces the pods and configmaps spread over [default: 100; --short: 10].
    #[arg(long)]
    namespaces: Option<usize>,
    /// Nodes the pods are scheduled on (created as Node objects too) [default: 1000; --short: 50].
    #[arg(long)]
    nodes: Option<usize>,
    /// Configmaps per namespace [default: 5].
    #[arg(long)]
    configmaps: Option<usize>,
    /// Changes per second while churning: half pod updates, a quarter creates, a quarter
    /// deletes, plus configmap updates [default: 1000; --short: 300].
    #[arg(long)]
    rate: Option<u32>,
    /// Seconds of churn (with --cluster: of watching) [default: 30; --short: 4].
    #[arg(long)]
    duration: Option<f64>,
    /// Seconds between injected faults, cycling through: drop every watch; compact the history
    /// and drop every watch (410 Expired, relist); restart the server [default: 5; --short: 1].
    #[arg(long)]
    fault_every: Option<f64>,
    /// Inject no faults.
    #[arg(long)]
    no_faults: bool,
    /// Print a plain line every second instead of live progress bars (the default when stdout
    /// is not a terminal).
    #[arg(long)]
    plain: bool,
}

/// The run's settings, defaults filled in.
#[derive(Debug, Clone)]
struct Settings {
    pods: usize,
    namespaces: usize,
    nodes: usize,
    configmaps: usize,
    rate: u32,
    duration: Duration,
    fault_every: Option<Duration>,
    live: bool,
}

impl Settings {
    fn from(args: &Args) -> Self {
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
        }
    }
}

fn named<K: Resource + Default>(ns: Option<&str>, name: &str) -> K {
    let mut object = K::default();
    object.meta_mut().name = Some(name.to_owned());
    object.meta_mut().namespace = ns.map(str::to_owned);
    object
}

fn key_of<K: Resource>(o: &K) -> String {
    match o.meta().namespace.as_deref() {
        Some(ns) => format!("{ns}/{}", o.name_any()),
        None => o.name_any(),
    }
}

fn rv_of<K: Resource>(o: &K) -> String {
    o.resource_version().unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------
// The three handlers.

/// Replays notifications into key → resourceVersion: a handler's view of the collection.
struct Mirror<K> {
    state: Mutex<HashMap<String, String>>,
    _kind: std::marker::PhantomData<fn(K)>,
}

impl<K> Default for Mirror<K> {
    fn default() -> Self {
        Self {
            state: Mutex::default(),
            _kind: std::marker::PhantomData,
        }
    }
}

impl<K: Resource + Send + Sync + 'static> ResourceEventHandler<K> for Mirror<K> {
    fn on_add(&self, obj: &Arc<K>, _: bool) {
        self.state.lock().insert(key_of(&**obj), rv_of(&**obj));
    }
    fn on_update(&self, _: &Arc<K>, new: &Arc<K>) {
        self.state.lock().insert(key_of(&**new), rv_of(&**new));
    }
    fn on_delete(&self, obj: DeletedObject<K>) {
        let key = match (obj.tombstone(), obj.object()) {
            (Some(t), _) => t.key.clone(),
            (None, Some(o)) => key_of(&**o),
            (None, None) => return,
        };
        self.state.lock().remove(&key);
    }
}

/// Counts pods per node from notifications alone; checked against the `node` index at the end.
#[derive(Default)]
struct PodsPerNode {
    counts: Mutex<HashMap<String, i64>>,
    /// Deletions that came without the object's last state (cannot be attributed to a node).
    unattributed: AtomicU64,
}

impl PodsPerNode {
    fn shift(&self, pod: &Pod, by: i64) {
        if let Some(node) = node_of(pod) {
            let mut counts = self.counts.lock();
            let count = counts.entry(node.to_owned()).or_default();
            *count += by;
            if *count == 0 {
                counts.remove(node);
            }
        }
    }
}

impl ResourceEventHandler<Pod> for PodsPerNode {
    fn on_add(&self, pod: &Arc<Pod>, _: bool) {
        self.shift(pod, 1);
    }
    fn on_update(&self, old: &Arc<Pod>, new: &Arc<Pod>) {
        if node_of(old) != node_of(new) {
            self.shift(old, -1);
            self.shift(new, 1);
        }
    }
    fn on_delete(&self, obj: DeletedObject<Pod>) {
        match obj.object() {
            Some(pod) => self.shift(pod, -1),
            None => {
                self.unattributed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Live numbers.

#[derive(Default)]
struct Counters {
    changes: AtomicU64,
    faults: AtomicU64,
    watch_errors: AtomicU64,
    relists: AtomicU64,
}

struct Informers {
    pods: Arc<SharedIndexInformer<Pod>>,
    configmaps: Arc<SharedIndexInformer<ConfigMap>>,
    pod_mirror: Arc<Mirror<Pod>>,
    configmap_mirror: Arc<Mirror<ConfigMap>>,
    per_node: Arc<PodsPerNode>,
    registrations: Vec<HandlerRegistration>,
}

impl Informers {
    /// Notifications handled, all handlers together.
    fn delivered(&self) -> u64 {
        self.registrations
            .iter()
            .map(|r| r.delivered() as u64)
            .sum()
    }

    /// Events handled, each counted once (by the two mirrors, one per informer).
    fn events(&self) -> u64 {
        [&self.registrations[0], &self.registrations[2]]
            .iter()
            .map(|r| r.delivered() as u64)
            .sum()
    }
    fn backlog(&self) -> usize {
        self.registrations
            .iter()
            .map(HandlerRegistration::backlog)
            .sum()
    }
}

/// Progress bars on a terminal; a plain line a second otherwise.
enum Display {
    Live {
        _multi: MultiProgress,
        sync: ProgressBar,
        status: ProgressBar,
    },
    Plain,
}

impl Display {
    fn new(live: bool, expected: u64) -> Self {
        if !live {
            return Display::Plain;
        }
        let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stdout());
        let sync = multi.add(ProgressBar::new(expected));
        sync.set_style(
            ProgressStyle::with_template("{prefix:>8} [{bar:40}] {pos}/{len} objects {msg}")
                .expect("a valid template")
                .progress_chars("=> "),
        );
        sync.set_prefix("sync");
        let status = multi.add(ProgressBar::new_spinner());
        status.set_style(
            ProgressStyle::with_template("{prefix:>8} {spinner} {msg}").expect("a valid template"),
        );
        status.set_prefix("running");
        Display::Live {
            _multi: multi,
            sync,
            status,
        }
    }

    fn sync_progress(&self, cached: u64, done: bool) {
        match self {
            Display::Live { sync, .. } => {
                sync.set_position(cached);
                if done {
                    sync.finish_with_message("synced");
                }
            }
            Display::Plain => println!(
                "sync: {cached} objects cached{}",
                if done { ", synced" } else { "" }
            ),
        }
    }

    fn status(&self, line: &str) {
        match self {
            Display::Live { status, .. } => {
                status.set_message(line.to_owned());
                status.tick();
            }
            Display::Plain => println!("{line}"),
        }
    }

    fn finish(&self) {
        if let Display::Live { status, .. } = self {
            status.finish();
        }
    }
}

// ---------------------------------------------------------------------------------------------

fn main() -> ExitCode {
    let args = Args::parse();
    // `RUST_LOG` (e.g. `RUST_LOG=informer_reflector=debug`) selects what the stack logs; warnings
    // by default. Log lines go to stderr, away from the progress display on stdout.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let settings = Settings::from(&args);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let outcome = runtime.block_on(async {
        if args.cluster {
            run_cluster(&settings).await
        } else {
            run_simulated(&settings).await
        }
    });
    match outcome {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("demo failed: {e}");
            ExitCode::FAILURE
        }
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The factory with the demo's informers, indexes and handlers.
fn informers(
    factory: &KubeInformerFactory,
    counters: &Arc<Counters>,
) -> Result<Informers, BoxError> {
    let pods = factory.informer::<Pod>(); // with the `namespace` index, as in client-go
    let configmaps = factory.informer::<ConfigMap>();
    pods.add_indexers(indexers([("node", node_index())]))?;
    pods.set_watch_error_handler(watch_error_counter(counters))?;
    configmaps.set_watch_error_handler(watch_error_counter(counters))?;
    let pod_mirror = Arc::new(Mirror::<Pod>::default());
    let configmap_mirror = Arc::new(Mirror::<ConfigMap>::default());
    let per_node = Arc::new(PodsPerNode::default());
    let registrations = vec![
        pods.add_event_handler(Arc::clone(&pod_mirror))?,
        pods.add_event_handler(Arc::clone(&per_node))?,
        configmaps.add_event_handler(Arc::clone(&configmap_mirror))?,
    ];
    Ok(Informers {
        pods,
        configmaps,
        pod_mirror,
        configmap_mirror,
        per_node,
        registrations,
    })
}

fn watch_error_counter(counters: &Arc<Counters>) -> informers::reflector::WatchErrorHandler {
    let counters = Arc::clone(counters);
    Arc::new(move |e: &informers::reflector::Error| {
        counters.watch_errors.fetch_add(1, Ordering::Relaxed);
        if e.is_expired() {
            counters.relists.fetch_add(1, Ordering::Relaxed);
        }
    })
}

/// Shows sync progress until every informer has synced (or `limit` passes).
async fn show_sync(
    factory: &KubeInformerFactory,
    informers: &Informers,
    display: &Display,
    limit: Duration,
) -> Result<Duration, BoxError> {
    let begun = Instant::now();
    let mut last_plain = Instant::now();
    loop {
        let cached = (informers.pods.lister().len() + informers.configmaps.lister().len()) as u64;
        let synced = informers.pods.has_synced() && informers.configmaps.has_synced();
        if synced {
            display.sync_progress(cached, true);
            break;
        }
        if matches!(display, Display::Live { .. }) || last_plain.elapsed() >= Duration::from_secs(1)
        {
            display.sync_progress(cached, false);
            last_plain = Instant::now();
        }
        if begun.elapsed() > limit {
            let report = factory.wait_for_cache_sync(Some(Duration::ZERO)).await;
            return Err(format!("caches did not sync within {limit:?}: {report}").into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(begun.elapsed())
}

fn status_line(
    elapsed: Duration,
    informers: &Informers,
    counters: &Counters,
    events_per_sec: f64,
) -> String {
    format!(
        "t={:>5.1}s  events/s={:>7.0}  cache: {} pods, {} configmaps  changes={}  faults={}  \
         watch errors={}  relists={}  handler backlog={}",
        elapsed.as_secs_f64(),
        events_per_sec,
        informers.pods.lister().len(),
        informers.configmaps.lister().len(),
        counters.changes.load(Ordering::Relaxed),
        counters.faults.load(Ordering::Relaxed),
        counters.watch_errors.load(Ordering::Relaxed),
        counters.relists.load(Ordering::Relaxed),
        informers.backlog(),
    )
}

async fn run_simulated(settings: &Settings) -> Result<bool, BoxError> {
    let Settings {
        pods: pod_count,
        namespaces,
        nodes,
        configmaps,
        ..
    } = *settings;
    println!(
        "informers demo: {pod_count} pods in {namespaces} namespaces on {nodes} nodes, \
         {} configmaps; {} changes/s for {:.0?}; faults {}",
        configmaps * namespaces,
        settings.rate,
        settings.duration,
        settings
            .fault_every
            .map_or_else(|| "off".to_owned(), |d| format!("every {d:.1?}")),
    );

    // The server, seeded.
    let server = Arc::new(
        ApiServer::start(Config {
            history_size: 50_000,
            ..Config::default().with_core_types()
        })
        .await?,
    );
    let seeding = Instant::now();
    for n in 0..namespaces {
        server.create(&named::<Namespace>(None, &format!("ns-{n}")))?;
    }
    for n in 0..nodes {
        server.create(&named::<Node>(None, &format!("node-{n}")))?;
    }
    let mut live_pods = Vec::with_capacity(pod_count);
    for i in 0..pod_count {
        let (ns, name) = (format!("ns-{}", i % namespaces), format!("pod-{i}"));
        server.create(&pod(
            &ns,
            &name,
            &format!("node-{}", (i * 7) % nodes),
            &format!("app-{}", i % 20),
        ))?;
        live_pods.push((ns, name));
    }
    for n in 0..namespaces {
        for c in 0..configmaps {
            let mut cm = named::<ConfigMap>(Some(&format!("ns-{n}")), &format!("cm-{c}"));
            cm.data = Some(BTreeMap::from([("generation".to_owned(), "0".to_owned())]));
            server.create(&cm)?;
        }
    }
    println!(
        "server: informer-apiserver at {} (seeded in {:.2?}, resourceVersion {})",
        server.url(),
        seeding.elapsed(),
        server.resource_version()
    );

    // The factory: short reflector backoff so faults are ridden out quickly.
    let client = kube_client::Client::try_from(kube_client::Config::new(server.url().parse()?))?;
    let backoff = || BackoffConfig {
        initial: Duration::from_millis(50),
        cap: Duration::from_secs(1),
        ..BackoffConfig::default()
    };
    let factory = KubeInformerFactory::new(KubeSource::new(client))
        .configure::<Pod>(move |i| i.with_reflector_config(move |r| r.with_backoff(backoff())))
        .configure::<ConfigMap>(move |i| {
            i.with_reflector_config(move |r| r.with_backoff(backoff()))
        });
    let counters = Arc::new(Counters::default());
    let informers = informers(&factory, &counters)?;

    let display = Display::new(settings.live, (pod_count + configmaps * namespaces) as u64);
    factory.start()?;
    let took = show_sync(&factory, &informers, &display, Duration::from_secs(300)).await?;
    let report = factory
        .wait_for_cache_sync(Some(Duration::from_secs(60)))
        .await;
    if !report.all_synced() {
        return Err(format!("caches did not sync: {report}").into());
    }
    if !settings.live {
        println!("synced in {took:.2?}: {report}");
    }

    // Churn and faults.
    let stop = CancellationToken::new();
    let churn = tokio::spawn(churn(
        Arc::clone(&server),
        live_pods,
        settings.clone(),
        Arc::clone(&counters),
        stop.clone(),
    ));
    let faults = settings.fault_every.map(|every| {
        tokio::spawn(inject_faults(
            Arc::clone(&server),
            every,
            Arc::clone(&counters),
            stop.clone(),
        ))
    });
    let started = Instant::now();
    let mut last = (Instant::now(), informers.events());
    let mut next_plain = Instant::now() + Duration::from_secs(1);
    while started.elapsed() < settings.duration {
        tokio::time::sleep(Duration::from_millis(250)).await;
        if !settings.live && Instant::now() < next_plain {
            continue;
        }
        next_plain = Instant::now() + Duration::from_secs(1);
        let events = informers.events();
        let rate = (events - last.1) as f64 / last.0.elapsed().as_secs_f64();
        last = (Instant::now(), events);
        display.status(&status_line(started.elapsed(), &informers, &counters, rate));
    }
    stop.cancel();
    churn.await??;
    if let Some(faults) = faults {
        faults.await?;
    }
    display.finish();

    // The check.
    println!("churn stopped; waiting for the caches to catch up with the server...");
    let settle = Instant::now();
    let verdict = loop {
        let verdict = check(&server, &informers)?;
        if verdict.ok() || settle.elapsed() > Duration::from_secs(60) {
            break verdict;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let total_events = informers.delivered();
    factory.shutdown().await?;
    println!(
        "\nsummary: {} changes, {} faults injected, {} watch errors, {} relists after 410, \
         {total_events} notifications handled; all informers stopped and joined",
        counters.changes.load(Ordering::Relaxed),
        counters.faults.load(Ordering::Relaxed),
        counters.watch_errors.load(Ordering::Relaxed),
        counters.relists.load(Ordering::Relaxed),
    );
    verdict.print(settle.elapsed());
    // Every task holding the server has finished: it can be shut down.
    if let Ok(server) = Arc::try_unwrap(server) {
        server.shutdown().await;
    }
    Ok(verdict.ok())
}

/// Changes at `settings.rate` per second until stopped.
async fn churn(
    server: Arc<ApiServer>,
    mut live: Vec<(String, String)>,
    settings: Settings,
    counters: Arc<Counters>,
    stop: CancellationToken,
) -> Result<(), BoxError> {
    let mut rng = fastrand::Rng::with_seed(7);
    let mut next_id = live.len();
    let begun = Instant::now();
    let mut done: u64 = 0;
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    while !stop.is_cancelled() {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tick.tick() => {}
        }
        let due = (begun.elapsed().as_secs_f64() * f64::from(settings.rate)) as u64;
        while done < due {
            done += 1;
            let roll = rng.u32(..100);
            let result = if roll < 10 {
                let ns = format!("ns-{}", rng.usize(..settings.namespaces));
                let cm = format!("cm-{}", rng.usize(..settings.configmaps.max(1)));
                server
                    .patch::<ConfigMap>(
                        Some(&ns),
                        &cm,
                        &serde_json::json!({"data": {"generation": done.to_string()}}),
                    )
                    .map(drop)
            } else if roll < 55 && !live.is_empty() {
                let (ns, name) = &live[rng.usize(..live.len())];
                let patch = if rng.bool() {
                    serde_json::json!({"metadata": {"labels": {"generation": done.to_string()}}})
                } else {
                    let node = format!("node-{}", rng.usize(..settings.nodes));
                    serde_json::json!({"spec": {"nodeName": node}})
                };
                server.patch::<Pod>(Some(ns), name, &patch).map(drop)
            } else if roll < 78 || live.is_empty() {
                let (ns, name) = (
                    format!("ns-{}", rng.usize(..settings.namespaces)),
                    format!("pod-{next_id}"),
                );
                next_id += 1;
                let node = format!("node-{}", rng.usize(..settings.nodes));
                let created = server
                    .create(&pod(&ns, &name, &node, &format!("app-{}", next_id % 20)))
                    .map(drop);
                live.push((ns, name));
                created
            } else {
                let (ns, name) = live.swap_remove(rng.usize(..live.len()));
                server.delete::<Pod>(Some(&ns), &name).map(drop)
            };
            result?;
            counters.changes.fetch_add(1, Ordering::Relaxed);
        }
    }
    Ok(())
}

/// Cycles through the faults every `every` until stopped.
async fn inject_faults(
    server: Arc<ApiServer>,
    every: Duration,
    counters: Arc<Counters>,
    stop: CancellationToken,
) {
    let mut round = 0usize;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
        let faults = server.faults();
        match round % 3 {
            0 => faults.drop_watches(),
            1 => {
                faults.compact_all();
                faults.drop_watches();
            }
            _ => faults.restart(),
        }
        round += 1;
        counters.faults.fetch_add(1, Ordering::Relaxed);
    }
}

/// What the final check found.
#[derive(Default)]
struct Verdict {
    pods: usize,
    configmaps: usize,
    nodes_checked: usize,
    problems: Vec<String>,
}

impl Verdict {
    fn ok(&self) -> bool {
        self.problems.is_empty()
    }

    fn print(&self, settled_in: Duration) {
        if self.ok() {
            println!(
                "CHECK PASSED: the caches match the server exactly — {} pods and {} configmaps, \
                 object by object at the same resourceVersion; the three handlers' views agree; \
                 the node index is exact on {} nodes (caught up {settled_in:.2?} after the churn \
                 stopped).",
                self.pods, self.configmaps, self.nodes_checked
            );
        } else {
            println!(
                "CHECK FAILED: {} differences between the caches and the server:",
                self.problems.len()
            );
            for problem in self.problems.iter().take(20) {
                println!("  - {problem}");
            }
        }
    }
}

/// Compares one collection: server objects against a key → resourceVersion view.
fn compare(
    what: &str,
    server: &BTreeMap<String, String>,
    view: &HashMap<String, String>,
    problems: &mut Vec<String>,
) {
    for (key, rv) in server {
        match view.get(key) {
            None => problems.push(format!("{what}: {key} missing (server has rv {rv})")),
            Some(seen) if seen != rv => {
                problems.push(format!("{what}: {key} at rv {seen}, server has rv {rv}"));
            }
            Some(_) => {}
        }
    }
    for key in view.keys().filter(|k| !server.contains_key(*k)) {
        problems.push(format!("{what}: {key} present but deleted on the server"));
    }
}

/// Compares both caches and both mirrors with the server's pods and configmaps.
fn compare_all(
    informers: &Informers,
    pods: &BTreeMap<String, String>,
    configmaps: &BTreeMap<String, String>,
    problems: &mut Vec<String>,
) {
    compare("pod cache", pods, &cache_state(&informers.pods), problems);
    let configmap_cache = cache_state(&informers.configmaps);
    compare("configmap cache", configmaps, &configmap_cache, problems);
    compare(
        "pod handler",
        pods,
        &informers.pod_mirror.state.lock(),
        problems,
    );
    let configmap_mirror = informers.configmap_mirror.state.lock();
    compare("configmap handler", configmaps, &configmap_mirror, problems);
}

fn server_state<K>(server: &ApiServer) -> Result<BTreeMap<String, String>, BoxError>
where
    K: Resource + serde::de::DeserializeOwned + informers::k8s_openapi::ListableResource,
{
    let (items, _) = server.list::<K>(None)?;
    Ok(items.iter().map(|o| (key_of(o), rv_of(o))).collect())
}

fn cache_state<K>(informer: &SharedIndexInformer<K>) -> HashMap<String, String>
where
    K: Resource + Send + Sync + 'static + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    K::DynamicType: Default,
{
    informer
        .lister()
        .list(&informer_store::Everything)
        .iter()
        .map(|o| (key_of(&**o), rv_of(&**o)))
        .collect()
}

fn check(server: &ApiServer, informers: &Informers) -> Result<Verdict, BoxError> {
    let per_node = &informers.per_node;
    let pods = server_state::<Pod>(server)?;
    let configmaps = server_state::<ConfigMap>(server)?;
    let mut problems = Vec::new();
    compare_all(informers, &pods, &configmaps, &mut problems);
    if informers.backlog() > 0 {
        problems.push(format!(
            "{} notifications still buffered for handlers",
            informers.backlog()
        ));
    }

    // The node index against the server's pods, and against the per-node handler.
    let (server_pods, _) = server.list::<Pod>(None)?;
    let mut by_node: BTreeMap<String, usize> = BTreeMap::new();
    for p in &server_pods {
        if let Some(node) = node_of(p) {
            *by_node.entry(node.to_owned()).or_default() += 1;
        }
    }
    let indexer = informers.pods.lister();
    for (node, count) in &by_node {
        let indexed = indexer.index_keys("node", node)?.len();
        if indexed != *count {
            problems.push(format!(
                "node index: {node} has {indexed} pods, the server {count}"
            ));
        }
    }
    let indexed_nodes = indexer.index_values("node");
    for node in indexed_nodes
        .iter()
        .filter(|n| !by_node.contains_key(n.as_str()))
    {
        problems.push(format!("node index: {node} listed, but no pod is on it"));
    }
    let counts = per_node.counts.lock();
    if per_node.unattributed.load(Ordering::Relaxed) == 0 {
        for (node, count) in &by_node {
            let seen = counts.get(node).copied().unwrap_or_default();
            if seen != *count as i64 {
                problems.push(format!(
                    "per-node handler: {node} has {seen} pods, the server {count}"
                ));
            }
        }
    }
    Ok(Verdict {
        pods: pods.len(),
        configmaps: configmaps.len(),
        nodes_checked: by_node.len(),
        problems,
    })
}

/// `--cluster`: the same informers against the current kubeconfig's cluster, read-only.
async fn run_cluster(settings: &Settings) -> Result<bool, BoxError> {
    let factory = KubeSource::try_default()
        .await
        .map(KubeInformerFactory::new)?;
    let client = factory.source().client().clone();
    println!(
        "informers demo against the cluster of the current kubeconfig (default namespace {}), \
         read-only, for {:.0?}",
        client.default_namespace(),
        settings.duration
    );
    let counters = Arc::new(Counters::default());
    let informers = informers(&factory, &counters)?;
    let display = Display::new(settings.live, 0);
    factory.start()?;
    let took = show_sync(&factory, &informers, &display, Duration::from_secs(300)).await?;
    println!(
        "synced in {took:.2?}: {} pods, {} configmaps",
        informers.pods.lister().len(),
        informers.configmaps.lister().len()
    );
    let started = Instant::now();
    let mut last = (Instant::now(), informers.events());
    while started.elapsed() < settings.duration {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let events = informers.events();
        let rate = (events - last.1) as f64 / last.0.elapsed().as_secs_f64();
        last = (Instant::now(), events);
        display.status(&status_line(started.elapsed(), &informers, &counters, rate));
    }
    display.finish();

    // The check: each cache against the cluster's list at exactly the cache's own
    // resourceVersion (resourceVersionMatch=Exact), so that changes made since the cache's last
    // event do not count. A snapshot counts only while the handlers' view equals the cache.
    let pods_api = kube_client::Api::<Pod>::all(client.clone());
    let configmaps_api = kube_client::Api::<ConfigMap>::all(client);
    let pause = || tokio::time::sleep(Duration::from_millis(500));
    let pod_check = check_at_same_version(
        &pods_api,
        || settled(&informers.pods, &informers.pod_mirror.state.lock()),
        10,
        pause,
    )
    .await;
    let configmap_check = check_at_same_version(
        &configmaps_api,
        || {
            settled(
                &informers.configmaps,
                &informers.configmap_mirror.state.lock(),
            )
        },
        10,
        pause,
    )
    .await;
    factory.shutdown().await?;
    let checks = [("pods", &pod_check), ("configmaps", &configmap_check)];
    for (what, check) in checks {
        println!("{what}: the cache {check}");
    }
    if checks.iter().all(|(_, c)| c.passed()) {
        println!(
            "CHECK PASSED: the caches and the handlers' views match the cluster object by object, \
             each at its own resourceVersion."
        );
        Ok(true)
    } else if checks
        .iter()
        .any(|(_, c)| matches!(c, CacheCheck::Differs { .. }))
    {
        for (what, check) in checks {
            if let CacheCheck::Differs { differences, .. } = check {
                for d in differences.iter().take(20) {
                    println!("  {what}: {d}");
                }
            }
        }
        println!("CHECK FAILED: a cache differs from the cluster at the same resourceVersion.");
        Ok(false)
    } else {
        println!("CHECK NOT DONE: the caches could not be compared with the cluster (see above).");
        Ok(false)
    }
}

/// An informer's cache at its last resourceVersion, if its handlers' view is the same.
fn settled<K>(
    informer: &SharedIndexInformer<K>,
    mirror: &HashMap<String, String>,
) -> Option<Snapshot>
where
    K: Resource + Send + Sync + 'static + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    K::DynamicType: Default,
{
    let snapshot = informer_snapshot(informer)?;
    let same = snapshot.objects.len() == mirror.len()
        && snapshot
            .objects
            .iter()
            .all(|(k, rv)| mirror.get(k) == Some(rv));
    same.then_some(snapshot)
}
