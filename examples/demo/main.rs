//! The informers stack at work: a shared informer factory keeps pod and configmap caches in
//! step with a busy API server that keeps failing, then proves it.
//!
//! By default the demo starts the embedded API server simulator with 10,000 pods in 100
//! namespaces on 1,000 nodes, creates, updates and deletes pods and configmaps at a steady rate,
//! and on a schedule drops every watch, compacts the history under the watchers (so they come
//! back to `410 Expired` and relist) and restarts the server. A `KubeInformerFactory` runs pod
//! and configmap informers with the `namespace` and `node` indexes and three handlers, and on
//! the same informers a controller that keeps a `pod-count` ConfigMap in every namespace (the
//! churn drifts some of them behind its back). At the end it checks, object by object, that
//! every cache holds exactly what the server holds at the same resourceVersion, that each
//! handler's view agrees, that the `node` index is exact, and that every namespace's
//! `pod-count` gives the server's number of pods in it — and exits non-zero if anything differs.
//!
//! ```sh
//! cargo run --release --example demo              # the full run, about 30 s
//! cargo run --release --example demo -- --short   # a few seconds on a small world (CI)
//! cargo run --release --example demo -- --cluster # read-only, against your kubeconfig
//! cargo run --release --example demo -- --help
//! ```

//!
//! The informer code — the factory, the informers, the `node` index and the handlers — is in
//! `informers.rs`, the controller in `controller.rs`. The rest drives, shows and checks it: `args.rs` (the command line),
//! `world.rs` (the simulator, its objects, the churn and the faults), `progress.rs` (the live
//! display) and `check.rs` (the final comparison with the server, and the `--cluster` check).

mod args;
mod check;
mod controller;
mod informers;
mod progress;
mod world;

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use clap::Parser;

use crate::args::{Args, Settings};
use crate::informers::Informers;
use crate::progress::{Counters, Display, Scraped};
use ::informers::kube::KubeInformerFactory;
use ::informers::metrics::{Endpoints, Metrics};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

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

/// The default run: the informers against the simulator, under churn and faults, then the check.
async fn run_simulated(settings: &Settings) -> Result<bool, BoxError> {
    println!(
        "informers demo: {} pods in {} namespaces on {} nodes, {} configmaps; {} changes/s for \
         {:.0?}; faults {}",
        settings.pods,
        settings.namespaces,
        settings.nodes,
        settings.configmaps * settings.namespaces,
        settings.rate,
        settings.duration,
        settings
            .fault_every
            .map_or_else(|| "off".to_owned(), |d| format!("every {d:.1?}")),
    );
    let (server, live_pods) = world::seed(settings).await?;

    // The informers, synced, every figure of theirs in one metrics registry.
    let metrics = Metrics::new();
    let factory = informers::simulator_factory(&server.url(), &metrics)?;
    metrics.watch_factory(&factory);
    let counters = Arc::new(Counters::default());
    let informers = Informers::new(&factory)?;
    // The controller phase: a reconciler on the same informers (see `controller.rs`).
    let controller = controller::PodCounter::start(&factory, &informers, &metrics)?;
    let serving = serve_metrics(settings.metrics_port, &metrics, &factory).await?;
    let objects = settings.pods + settings.configmaps * settings.namespaces;
    let display = Display::new(settings.live, objects as u64);
    factory.start()?;
    let took =
        progress::show_sync(&factory, &informers, &display, Duration::from_secs(300)).await?;
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
    let churn = world::Churn::start(&server, live_pods, settings, &counters);
    let tick = Duration::from_millis(250);
    progress::show_status(
        &display,
        settings.duration,
        tick,
        &informers,
        &counters,
        &metrics,
    )
    .await;
    churn.stop().await?;
    display.finish();

    // The check.
    println!("churn stopped; waiting for the caches to catch up with the server...");
    let settle = Instant::now();
    let verdict = check::until_caught_up(&server, &informers).await?;
    let total_events = informers.delivered();
    controller.stop().await?;
    factory.shutdown().await?;
    if let Some(serving) = serving {
        serving.abort();
    }
    let scraped = Scraped::from(&metrics);
    println!(
        "\nsummary: {} changes, {} faults injected, {} watch errors, {} relists after 410, \
         {total_events} notifications handled; the controller: {} reconciles, {} writes, {} \
         errors retried, {} drifts repaired; all informers stopped and joined",
        counters.changes.load(Ordering::Relaxed),
        counters.faults.load(Ordering::Relaxed),
        scraped.watch_errors,
        scraped.relists,
        scraped.reconciles,
        scraped.writes,
        scraped.reconcile_errors,
        counters.drifts.load(Ordering::Relaxed),
    );
    verdict.print(settle.elapsed());
    // Every task holding the server has finished: it can be shut down.
    if let Ok(server) = Arc::try_unwrap(server) {
        server.shutdown().await;
    }
    Ok(verdict.ok())
}

/// `--cluster`: the same informers against the current kubeconfig's cluster, read-only.
async fn run_cluster(settings: &Settings) -> Result<bool, BoxError> {
    let metrics = Metrics::new();
    let factory = informers::cluster_factory(&metrics).await?;
    metrics.watch_factory(&factory);
    let serving = serve_metrics(settings.metrics_port, &metrics, &factory).await?;
    let client = factory.source().client().clone();
    println!(
        "informers demo against the cluster of the current kubeconfig (default namespace {}), \
         read-only, for {:.0?}",
        client.default_namespace(),
        settings.duration
    );
    let counters = Arc::new(Counters::default());
    let informers = Informers::new(&factory)?;
    let display = Display::new(settings.live, 0);
    factory.start()?;
    let took =
        progress::show_sync(&factory, &informers, &display, Duration::from_secs(300)).await?;
    println!(
        "synced in {took:.2?}: {} pods, {} configmaps",
        informers.pods.lister().len(),
        informers.configmaps.lister().len()
    );
    let tick = Duration::from_secs(1);
    progress::show_status(
        &display,
        settings.duration,
        tick,
        &informers,
        &counters,
        &metrics,
    )
    .await;
    display.finish();

    let verdict = check::against_cluster(client, &informers).await;
    factory.shutdown().await?;
    if let Some(serving) = serving {
        serving.abort();
    }
    Ok(verdict.print())
}

/// With `--metrics-port`, serves `/metrics`, `/readyz` and `/livez` on 127.0.0.1 while the demo
/// runs.
async fn serve_metrics(
    port: Option<u16>,
    metrics: &Metrics,
    factory: &KubeInformerFactory,
) -> Result<Option<tokio::task::JoinHandle<std::io::Result<()>>>, BoxError> {
    let Some(port) = port else {
        return Ok(None);
    };
    let app = Endpoints::new(metrics.clone())
        .with_factory(factory)
        .router();
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    println!(
        "metrics: http://{}/metrics (and /readyz, /livez)",
        listener.local_addr()?
    );
    Ok(Some(tokio::spawn(async move {
        axum::serve(listener, app).await
    })))
}
