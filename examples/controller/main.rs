//! A controller: for every `App` (a custom resource with `spec.replicas`), keep exactly its
//! child ConfigMaps `<app>-0` … `<app>-<replicas - 1>` — create the missing, repair the drifted,
//! delete the extra — each owned by its `App` (an owner reference), and write what it did to the
//! `App`'s status; against the simulator, with faults injected on the way.
//!
//! The controller itself is `reconcile.rs` and the builder call in `replica.rs`; the rest sets
//! up the world (`main.rs`), the type (`app.rs`), and checks that the world converged
//! (`check.rs`). The reconcile works through `informers::runtime::Client`, controller-runtime's
//! default client: it reads the children from the informers' caches, and writes them with
//! server-side apply, as the field manager `app-controller`, with `force`, as a controller that
//! owns its children does. It writes the `App`'s status (the children in place, the generation
//! they are for) by server-side apply too, through the `/status` subresource, which the `App`
//! resource declares. Each write's resource version is recorded, and the next reconcile of the
//! `App` starts only once the caches show it (read-your-own-writes): a reconcile that wrote
//! children asks to run again at once, and that one finds them in the cache and writes the
//! status. The final check counts those waits, and that no replica created a child twice.
//!
//! It shows what a controller usually needs besides: a finalizer, so that an `App`'s children
//! are deleted before it goes even if the controller was down when it was deleted (the
//! simulator, like a cluster without the garbage collector, does not follow owner references);
//! Events on the `App` (`events.k8s.io/v1`) for what it did; a predicate that skips the updates
//! that need no reconcile (its own status writes among them); and an error policy that does not
//! retry an apply conflict (another field manager's fields), but waits for a change.
//!
//! On the way, a user applies a value of its own to a field of a child as `kubectl`: refused
//! with a conflict (the controller owns the field), then forced; the controller's next apply
//! takes the field back.
//!
//! With `--replicas 3`, three replicas of the controller run, each with its own client, caches
//! and controller, behind a leader election on a Lease: one reconciles at a time. The example
//! then cuts the leader off from the server and crashes its successor, and checks that the
//! world still converges each time.
//!
//! With `--shards N`, N replicas share the Apps instead (`Controller::sharded`): the hash
//! space of the Apps' uids is split into 8 shards, assigned to the replicas on Leases; each
//! replica caches and reconciles only the Apps of its shards (and their children, which follow
//! their owner's shard). The example checks that every replica caches exactly its shards, then
//! crashes one mid-run and checks that its shards move to the others and the world converges
//! (`sharded.rs`).
//!
//! With `--cluster`, the same controller (and its replicas) runs against the cluster of the
//! current kubeconfig (or the in-cluster service account) instead, until Ctrl-C or
//! `--seconds N`: it applies the `App` CustomResourceDefinition if the cluster does not serve
//! `apps.example.informers.dev` (with its status subresource) yet, and reconciles the Apps you
//! create, printing what it does. It needs rights to Apps and their status, ConfigMaps, Events
//! and Leases (and to CRDs, to apply one).
//!
//! ```sh
//! cargo run --example controller
//! cargo run --example controller -- --replicas 3
//! cargo run --example controller -- --shards 3
//! cargo run --example controller -- --cluster --replicas 2
//! kubectl apply -f - <<EOF
//! apiVersion: example.informers.dev/v1
//! kind: App
//! metadata: {name: web, namespace: default}
//! spec: {replicas: 3}
//! EOF
//! kubectl get app web -o jsonpath='{.status}'
//! ```

mod app;
mod check;
mod cluster;
mod reconcile;
mod replica;
mod sharded;

use std::collections::BTreeMap;
use std::sync::Arc;

use informers::apiserver::{ApiServer, Config, Failure, Isolation, ResourceInfo, Verb};
use informers::k8s_openapi::api::core::v1::ConfigMap;
use informers::k8s_openapi::api::events::v1::Event;
use informers::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use informers::kube_client::api::DeleteParams;
use informers::kube_client::{self, Api};
use informers::runtime::Client;

use app::{App, GROUP};
use check::{final_check, wait_converged};
use cluster::{Args, run_on_cluster};
use replica::{Mode, Replica, new_leader};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const NAMES: [&str; 3] = ["alpha", "beta", "gamma"];

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let Args {
        replicas,
        sharded,
        cluster,
        seconds,
    } = Args::parse()?;
    if cluster {
        return run_on_cluster(replicas, seconds).await;
    }
    // Served as a CRD with `subresources: {status: {}}` is: a write of an App keeps its
    // status, a write of its `/status` changes nothing else and takes no new generation.
    let apps = ResourceInfo::custom(GROUP, "v1", "App", "apps", true).with_status_subresource(true);
    let server = ApiServer::start(
        Config::default()
            .with_core_types()
            .register::<Event>()
            .register_info(apps.clone()),
    )
    .await?;
    if let Some(n) = sharded {
        return sharded::run(server, &apps, n).await;
    }
    for (name, replicas) in NAMES.into_iter().zip([2, 3, 1]) {
        server.create_value(&apps, app(name, replicas))?;
    }
    let ha = replicas > 1;
    let mut running = Vec::new();
    for i in 0..replicas {
        let name = format!("controller-{i}");
        let mode = if ha { Mode::Elected } else { Mode::Alone };
        running.push(Replica::on_simulator(&server, &name, mode)?);
    }
    // Kept past a crash, for the final check.
    let tallies: Vec<_> = running.iter().map(|r| Arc::clone(&r.tally)).collect();

    wait_converged(&server, &apps, "initial").await?;
    println!("converged: alpha has 2 children, beta 3, gamma 1, and each App's status says so");
    take_a_field_over(&server).await?;
    change_with_faults(&server, &apps).await?;
    wait_converged(&server, &apps, "after the changes").await?;
    println!(
        "converged again: alpha-0 repaired, beta scaled to 5, alpha to 1, gamma's child deleted with it"
    );
    if ha {
        lose_leaders(&server, &apps, &mut running).await?;
    }
    final_check(&server, &apps, &tallies)?;
    for replica in running {
        replica.stop().await?;
    }
    server.shutdown().await;
    Ok(())
}

/// A user applies a value of its own to alpha-0's `data.index`, a field the controller owns:
/// refused with a conflict that names the field, then forced, which takes the field over. The
/// change wakes the controller, whose forced apply takes the field back.
async fn take_a_field_over(server: &ApiServer) -> Result<(), BoxError> {
    let config = kube_client::Config::new(server.url().parse()?);
    // The same client outside a reconcile: its writes are made, with nothing to record.
    let user = Client::new(kube_client::Client::try_from(config)?);
    let drift = ConfigMap {
        metadata: ObjectMeta {
            name: Some("alpha-0".into()),
            namespace: Some("default".into()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("index".into(), "drifted".into())])),
        ..Default::default()
    };
    match user.apply(&drift, "kubectl", false).await {
        Err(e) if e.is_apply_conflict() => println!(
            "kubectl's apply to alpha-0 conflicts with the controller over {}: kubectl forces it",
            e.conflicting_fields().join(", ")
        ),
        Err(e) => return Err(e.into()),
        Ok(_) => return Err("kubectl's apply took a field of the controller's, unforced".into()),
    }
    user.apply(&drift, "kubectl", true).await?;
    Ok(())
}

/// Changes, with faults: failing patches (an apply, a status write or a finalizer's, as it
/// comes), a dropped watch, a scale up, a scale down and a deletion.
async fn change_with_faults(server: &ApiServer, apps: &ResourceInfo) -> Result<(), BoxError> {
    server
        .faults()
        .fail_next(Verb::Patch, 2, Failure::internal("injected"));
    scale(server, apps, "beta", 5)?;
    server.faults().drop_watches();
    scale(server, apps, "alpha", 1)?;
    // Deleted as a user deletes it (the API, not the simulator's handle, which deletes at once
    // as etcd would): held by the finalizer until the controller has cleaned up.
    let user = kube_client::Client::try_from(kube_client::Config::new(server.url().parse()?))?;
    let gone = Api::<App>::namespaced(user, "default")
        .delete("gamma", &DeleteParams::default())
        .await?;
    if gone.is_right() {
        return Err("gamma went at once: its finalizer should have held it".into());
    }
    Ok(())
}

/// The leader cut off from the server, then its successor crashed: another takes over each
/// time, and the world converges again.
async fn lose_leaders(
    server: &ApiServer,
    apps: &ResourceInfo,
    running: &mut Vec<Replica>,
) -> Result<(), BoxError> {
    // The leader cut off (its requests fail): another takes over.
    let leader = new_leader(running, None).await?;
    let cut = running[leader].name.clone();
    server
        .faults()
        .isolate(&cut, Isolation::Fail(Failure::unavailable()));
    let next = new_leader(running, Some(leader)).await?;
    scale(server, apps, "alpha", 4)?;
    wait_converged(server, apps, "after the leader was cut off").await?;
    println!(
        "{cut} cut off: {} took over and scaled alpha to 4",
        running[next].name
    );
    server.faults().heal(&cut);

    // The new leader crashes: another takes over once the lease expires.
    let crashed = running.remove(next);
    let name = crashed.name.clone();
    crashed.crash().await?;
    let after = new_leader(running, None).await?;
    scale(server, apps, "beta", 2)?;
    wait_converged(server, apps, "after the leader crashed").await?;
    println!(
        "{name} crashed: {} took over and scaled beta to 2",
        running[after].name
    );
    Ok(())
}

/// The App `name` wanting `replicas` children, in `default`.
fn app(name: &str, replicas: u32) -> serde_json::Value {
    serde_json::json!({"apiVersion": format!("{GROUP}/v1"), "kind": "App",
        "metadata": {"name": name, "namespace": "default"}, "spec": {"replicas": replicas}})
}

/// Sets `spec.replicas` of the App `name`, as a user's edit does.
fn scale(
    server: &ApiServer,
    apps: &ResourceInfo,
    name: &str,
    replicas: u32,
) -> Result<(), BoxError> {
    let patch = serde_json::json!({"spec": {"replicas": replicas}});
    server.patch_value(apps, Some("default"), name, &patch)?;
    Ok(())
}
