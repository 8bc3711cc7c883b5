//! `--cluster`: the controller's replicas against the cluster of the current kubeconfig (or
//! the in-cluster service account), and the command line.

use std::time::Duration;

use informers::k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use informers::kube_client::api::{ListParams, Patch, PatchParams};
use informers::kube_client::{self, Api};

use crate::BoxError;
use crate::app::{App, CONTROLLER, GROUP, app_crd};
use crate::replica::{Mode, Replica};

/// The command line: `--replicas N` (default 1), `--shards N` (N sharded replicas, on the
/// simulator), `--cluster`, `--seconds N` (with `--cluster`: stop after N seconds instead of at
/// Ctrl-C).
pub(crate) struct Args {
    pub(crate) replicas: usize,
    /// `--shards N`: N replicas sharing the Apps by shard.
    pub(crate) sharded: Option<usize>,
    pub(crate) cluster: bool,
    pub(crate) seconds: Option<u64>,
}

impl Args {
    pub(crate) fn parse() -> Result<Self, BoxError> {
        const USAGE: &str =
            "usage: controller [--replicas N | --shards N] [--cluster [--seconds N]]";
        let mut parsed = Self {
            replicas: 1,
            sharded: None,
            cluster: false,
            seconds: None,
        };
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            match arg.as_str() {
                "--replicas" => {
                    parsed.replicas = args
                        .next()
                        .and_then(|n| n.parse().ok())
                        .filter(|&n: &usize| n >= 1)
                        .ok_or("--replicas takes a number, at least 1")?;
                }
                "--shards" => {
                    let n = args.next().and_then(|n| n.parse().ok());
                    let n = n.filter(|&n: &usize| n >= 1);
                    parsed.sharded =
                        Some(n.ok_or("--shards takes a number of replicas, at least 1")?);
                }
                "--seconds" => {
                    let n = args.next().and_then(|n| n.parse().ok());
                    parsed.seconds = Some(n.ok_or("--seconds takes a whole number")?);
                }
                "--cluster" => parsed.cluster = true,
                other => return Err(format!("unknown argument {other:?}; {USAGE}").into()),
            }
        }
        if parsed.sharded.is_some() && (parsed.cluster || parsed.replicas > 1) {
            return Err(format!("--shards runs on the simulator, alone; {USAGE}").into());
        }
        Ok(parsed)
    }
}

/// Makes sure the cluster serves Apps with their status subresource: applies the CRD if it
/// serves none, or one without the subresource (installed by an earlier version of this
/// example), and waits (up to 30 s) until Apps are served.
async fn serve_apps(client: &kube_client::Client) -> Result<(), BoxError> {
    let apps: Api<App> = Api::all(client.clone());
    let served = || async { apps.list(&ListParams::default().limit(1)).await.is_ok() };
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let name = format!("apps.{GROUP}");
    if served().await {
        let with_status = |crd: &CustomResourceDefinition| {
            crd.spec
                .versions
                .iter()
                .all(|v| v.subresources.as_ref().is_some_and(|s| s.status.is_some()))
        };
        match crds.get_opt(&name).await {
            Ok(Some(crd)) if !with_status(&crd) => {} // applied below
            // Ours already, or not ours to read: as it is.
            _ => return Ok(()),
        }
    }
    // Server-side apply creates the CRD, or brings an earlier one to this configuration.
    let params = PatchParams::apply(CONTROLLER).force();
    crds.patch(&name, &params, &Patch::Apply(&app_crd()?))
        .await
        .map_err(|e| format!("cannot apply the App CRD: {e}"))?;
    println!("applied the CustomResourceDefinition {name}");
    tokio::time::timeout(Duration::from_secs(30), async {
        while !served().await {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
    .map_err(|_| "the cluster does not serve Apps 30 s after the CRD was applied".into())
}

/// `--cluster`: the controller's replicas against the current kubeconfig's cluster, until
/// Ctrl-C or `seconds`.
pub(crate) async fn run_on_cluster(replicas: usize, seconds: Option<u64>) -> Result<(), BoxError> {
    let config = kube_client::Config::infer().await?;
    println!("cluster: {}", config.cluster_url);
    serve_apps(&kube_client::Client::try_from(config.clone())?).await?;
    let ha = replicas > 1;
    let mut running = Vec::new();
    for i in 0..replicas {
        // A Lease holder's identity must be unique across processes.
        let name = format!("controller-{}-{i}", std::process::id());
        let client = kube_client::Client::try_from(config.clone())?;
        let mode = if ha { Mode::Elected } else { Mode::Alone };
        running.push(Replica::start(client, &name, mode, true)?);
    }
    println!(
        "{replicas} replica(s) running{}; create an App (see the example's header), Ctrl-C to stop",
        if ha {
            " behind the Lease default/app-controller"
        } else {
            ""
        }
    );
    let until = async {
        match seconds {
            Some(s) => tokio::time::sleep(Duration::from_secs(s)).await,
            None => std::future::pending().await,
        }
    };
    let mut status = tokio::time::interval(Duration::from_secs(10));
    status.tick().await;
    tokio::pin!(until);
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            () = &mut until => break,
            _ = status.tick() => print_caches(&running, ha),
        }
    }
    for replica in running {
        replica.stop().await?;
    }
    Ok(())
}

/// What each replica caches, and whether it leads.
fn print_caches(running: &[Replica], ha: bool) {
    for replica in running {
        let stats = replica.factory.stats();
        let cached: Vec<String> = stats
            .iter()
            .map(|s| format!("{} {}", s.objects, s.name))
            .collect();
        let role = if !ha {
            ""
        } else if replica.leads() {
            ", leading"
        } else {
            ", standing by"
        };
        println!("{}{role}: cached {}", replica.name, cached.join(", "));
    }
}
