//! `informer-apiserver`: the simulator as a standalone process, for kubectl and demos.
//!
//! Prints its URL, writes a kubeconfig, optionally seeds pods and churns them.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use informer_apiserver::{ApiServer, Config, ResourceInfo, SlowWatcher};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::events::v1::Event;
use serde_json::json;

/// A Kubernetes-compatible list/watch API server with fault injection.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// Port to listen on (127.0.0.1); 0 picks a free one.
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Pods to create at start, in namespace `default` (spread over 10 nodes).
    #[arg(long, default_value_t = 0)]
    seed_pods: usize,
    /// Pod updates per second (label and status changes on the seeded pods).
    #[arg(long, default_value_t = 0.0)]
    churn: f64,
    /// Where to write the kubeconfig (default: `informer-apiserver-<port>.kubeconfig` in the
    /// system's temporary directory; the path is printed).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Changes kept in the history (older resource versions get 410).
    #[arg(long, default_value_t = 10_000)]
    history: usize,
    /// How long after its commit the watch cache receives a change, in milliseconds: watches
    /// and cached reads see each change this late, as from a watch cache behind etcd.
    #[arg(long, default_value_t = 0)]
    cache_delay_ms: u64,
    /// Write resource versions as opaque strings (`x` and hex), not numbers.
    #[arg(long)]
    opaque_resource_versions: bool,
    /// Wait for a watcher that falls behind (feeding it from the history) instead of closing it.
    #[arg(long)]
    block_slow_watchers: bool,
    /// Serve a custom resource as its CRD would: `group/version/Kind/plural`, with `/cluster`
    /// appended for a cluster-scoped one and `/status` for one with a status subresource
    /// (e.g. `example.informers.dev/v1/App/apps/status`). Repeatable.
    #[arg(long = "custom-resource", value_parser = custom_resource)]
    custom_resources: Vec<ResourceInfo>,
}

/// A `--custom-resource` value: `group/version/Kind/plural[/cluster][/status]`.
fn custom_resource(value: &str) -> Result<ResourceInfo, String> {
    let parts: Vec<&str> = value.split('/').collect();
    let (head, flags) = parts.split_at(parts.len().min(4));
    let (cluster, status) = match flags {
        [] => (false, false),
        ["cluster"] => (true, false),
        ["status"] => (false, true),
        ["cluster", "status"] => (true, true),
        _ => return Err(bad_custom_resource(value)),
    };
    match head {
        [group, version, kind, plural] if !group.is_empty() => {
            Ok(ResourceInfo::custom(group, version, kind, plural, !cluster)
                .with_status_subresource(status))
        }
        _ => Err(bad_custom_resource(value)),
    }
}

fn bad_custom_resource(value: &str) -> String {
    format!("{value:?} is not group/version/Kind/plural[/cluster][/status]")
}

fn seed_pod(i: usize) -> Pod {
    serde_json::from_value(json!({
        "metadata": {
            "name": format!("pod-{i:06}"),
            "namespace": "default",
            "labels": {"app": format!("app-{}", i % 20), "tier": if i.is_multiple_of(2) { "web" } else { "db" }},
        },
        "spec": {
            "nodeName": format!("node-{}", i % 10),
            "containers": [{"name": "main", "image": "registry.example/app:1.0"}],
        },
        "status": {"phase": "Running"},
    }))
    .expect("a valid pod")
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .init();
    let args = Args::parse();
    let config = Config {
        port: args.port,
        history_size: args.history,
        opaque_resource_versions: args.opaque_resource_versions,
        slow_watcher: if args.block_slow_watchers {
            SlowWatcher::Block
        } else {
            SlowWatcher::Close
        },
        ..Config::default()
    }
    .with_core_types()
    .register::<Event>();
    let server = ApiServer::start(config).await?;
    for resource in args.custom_resources.iter().cloned() {
        server.register_info(resource);
    }
    let mut ns = Namespace::default();
    ns.metadata.name = Some("default".into());
    server.create(&ns)?;
    for i in 0..args.seed_pods {
        server.create(&seed_pod(i))?;
    }
    // The seeded pods are in the cache; what changes from here on reaches it late.
    server
        .faults()
        .set_cache_delay(Duration::from_millis(args.cache_delay_ms));
    let kubeconfig = args.kubeconfig.clone().unwrap_or_else(|| {
        let port = server.url().rsplit(':').next().unwrap_or("0").to_owned();
        std::env::temp_dir().join(format!("informer-apiserver-{port}.kubeconfig"))
    });
    std::fs::write(&kubeconfig, server.kubeconfig())?;
    println!("{}", server.url());
    println!(
        "kubeconfig written to {} (try: kubectl --kubeconfig {} get pods)",
        kubeconfig.display(),
        kubeconfig.display()
    );

    if args.churn > 0.0 && args.seed_pods > 0 {
        let period = Duration::from_secs_f64(1.0 / args.churn);
        let mut tick = tokio::time::interval(period);
        let mut n: usize = 0;
        loop {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => break,
                _ = tick.tick() => {
                    let name = format!("pod-{:06}", n % args.seed_pods);
                    let patch = json!({"metadata": {"labels": {"generation": (n / args.seed_pods).to_string()}}});
                    server.patch::<Pod>(Some("default"), &name, &patch)?;
                    n += 1;
                }
            }
        }
    } else {
        tokio::signal::ctrl_c().await?;
    }
    server.shutdown().await;
    Ok(())
}
