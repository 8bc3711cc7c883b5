//! The world the informers watch: the embedded API server simulator, seeded with namespaces,
//! nodes, pods and configmaps; the churn of changes; and the schedule of faults.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use informers::apiserver::{ApiServer, Config};
use informers::k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod};
use informers::kube_client::Resource;
use informers::prelude::CancellationToken;
use tokio::task::JoinHandle;

use crate::BoxError;
use crate::args::Settings;
use crate::controller::POD_COUNT;
use crate::progress::Counters;

/// An object of kind `K` with only a name (and a namespace).
fn named<K: Resource + Default>(ns: Option<&str>, name: &str) -> K {
    let mut object = K::default();
    object.meta_mut().name = Some(name.to_owned());
    object.meta_mut().namespace = ns.map(str::to_owned);
    object
}

/// A pod named `name` in `namespace`, scheduled on `node`, labelled `app`.
fn pod(namespace: &str, name: &str, node: &str, app: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": app}},
        "spec": {"nodeName": node, "containers": [{"name": "app", "image": "registry.local/app:1"}]},
    }))
    .expect("a valid pod")
}

/// The server, seeded: `namespaces` namespaces, `nodes` nodes, `pods` pods spread over them,
/// `configmaps` configmaps in each namespace. Returns it with the pods' namespaces and names.
pub(crate) async fn seed(
    settings: &Settings,
) -> Result<(Arc<ApiServer>, Vec<(String, String)>), BoxError> {
    let Settings {
        pods: pod_count,
        namespaces,
        nodes,
        configmaps,
        ..
    } = *settings;
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
    Ok((server, live_pods))
}

/// The churn and the faults, running until stopped.
pub(crate) struct Churn {
    stop: CancellationToken,
    churn: JoinHandle<Result<(), BoxError>>,
    faults: Option<JoinHandle<()>>,
}

impl Churn {
    /// Starts changing `server` at `settings.rate` a second (`live` are its pods), and injecting
    /// faults every `settings.fault_every`.
    pub(crate) fn start(
        server: &Arc<ApiServer>,
        live: Vec<(String, String)>,
        settings: &Settings,
        counters: &Arc<Counters>,
    ) -> Self {
        let stop = CancellationToken::new();
        let churn = tokio::spawn(churn(
            Arc::clone(server),
            live,
            settings.clone(),
            Arc::clone(counters),
            stop.clone(),
        ));
        let faults = settings.fault_every.map(|every| {
            tokio::spawn(inject_faults(
                Arc::clone(server),
                every,
                Arc::clone(counters),
                stop.clone(),
            ))
        });
        Churn {
            stop,
            churn,
            faults,
        }
    }

    /// Stops the churn and the faults, and waits for both to end.
    pub(crate) async fn stop(self) -> Result<(), BoxError> {
        self.stop.cancel();
        self.churn.await??;
        if let Some(faults) = self.faults {
            faults.await?;
        }
        Ok(())
    }
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
            let result = if roll < 1 {
                // Drift: a controller's `pod-count` changed behind its back, to be repaired.
                let ns = format!("ns-{}", rng.usize(..settings.namespaces));
                let patch = serde_json::json!({"data": {"pods": "drifted"}});
                if server.get::<ConfigMap>(Some(&ns), POD_COUNT).is_ok() {
                    server.patch::<ConfigMap>(Some(&ns), POD_COUNT, &patch)?;
                    counters.drifts.fetch_add(1, Ordering::Relaxed);
                }
                Ok(())
            } else if roll < 10 {
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
