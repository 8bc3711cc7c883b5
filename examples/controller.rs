//! A controller: for every `App` (a custom resource with `spec.replicas`), keep exactly its
//! child ConfigMaps `<app>-0` … `<app>-<replicas - 1>` — create the missing, repair the drifted,
//! delete the extra — each owned by its `App` (an owner reference), against the simulator, with
//! faults injected on the way.
//!
//! The controller itself is the `reconcile` function and the builder call in `Replica::start`;
//! the rest sets up the world and checks it converged. It shows what a controller usually
//! needs besides its reconcile: a finalizer, so that an `App`'s children are deleted before it
//! goes even if the controller was down when it was deleted (the simulator, like a cluster
//! without the garbage collector, does not follow owner references); Events on the `App`
//! (`events.k8s.io/v1`) for what it did; and a predicate that skips the updates that need no
//! reconcile.
//!
//! With `--replicas 3`, three replicas of the controller run, each with its own client, caches
//! and controller, behind a leader election on a Lease: one reconciles at a time. The example
//! then cuts the leader off from the server and crashes its successor, and checks that the
//! world still converges each time.
//!
//! With `--cluster`, the same controller (and its replicas) runs against the cluster of the
//! current kubeconfig (or the in-cluster service account) instead, until Ctrl-C or
//! `--seconds N`: it installs the `App` CustomResourceDefinition if the cluster does not serve
//! `apps.example.informers.dev` yet, and reconciles the Apps you create, printing what it does.
//! It needs rights to Apps, ConfigMaps, Events and Leases (and to CRDs, to install one).
//!
//! ```sh
//! cargo run --example controller
//! cargo run --example controller -- --replicas 3
//! cargo run --example controller -- --cluster --replicas 2
//! kubectl apply -f - <<EOF
//! apiVersion: example.informers.dev/v1
//! kind: App
//! metadata: {name: web, namespace: default}
//! spec: {replicas: 3}
//! EOF
//! ```

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use informers::apiserver::{ApiServer, Config, Failure, Isolation, ResourceInfo, Verb};
use informers::k8s_openapi::api::core::v1::ConfigMap;
use informers::k8s_openapi::api::events::v1::Event;
use informers::k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use informers::k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use informers::kube::{
    OWNER_UID_INDEX, UID_INDEX, owner_keys, owner_uid_index_func, uid_index_func,
};
use informers::kube_client::api::{DeleteParams, ListParams, PostParams};
use informers::kube_client::{self, Api, Resource as _};
use informers::leaderelection::{ElectionConfig, KubeLease, LeaderElector};
use informers::prelude::*;
use informers::runtime::events::{EventSpec, EventType, Recorder, Reporter};
use informers::runtime::predicates::{finalizers_changed, generation_changed};
use informers::runtime::{Controller, Finalize, FinalizerError, Request, RuntimeError, finalizer};
use serde::{Deserialize, Serialize};

/// The custom resource.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct App {
    metadata: ObjectMeta,
    spec: AppSpec,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct AppSpec {
    replicas: u32,
}

const GROUP: &str = "example.informers.dev";

impl kube_client::Resource for App {
    type DynamicType = ();
    type Scope = kube_client::core::NamespaceResourceScope;
    fn kind(_: &()) -> Cow<'_, str> {
        "App".into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        GROUP.into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        "v1".into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "apps".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// What reconcile needs: the API client, the ConfigMap cache and the event recorder.
struct Ctx {
    client: kube_client::Client,
    config_maps: Lister<ConfigMap>,
    recorder: Recorder,
    /// Print each action (on a cluster, where nothing else says what happened).
    verbose: bool,
}

/// The finalizer that holds a deleted `App` until its children are gone.
const FINALIZER: &str = "example.informers.dev/children";

/// The label that names a child's `App`, for the cleanup's consistent list.
const APP_LABEL: &str = "example.informers.dev/app";

/// The reasons of the Events that could not be published (the faults this example injects can
/// fail one), across every replica of this process: the final check does not ask for those.
static LOST_EVENTS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// The ConfigMap `app` wants at `index`.
fn desired(app: &App, index: u32) -> ConfigMap {
    let name = app.metadata.name.clone().unwrap_or_default();
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(format!("{name}-{index}")),
            namespace: app.metadata.namespace.clone(),
            labels: Some(BTreeMap::from([(APP_LABEL.into(), name.clone())])),
            owner_references: Some(vec![OwnerReference {
                api_version: format!("{GROUP}/v1"),
                kind: "App".into(),
                name,
                uid: app.metadata.uid.clone().unwrap_or_default(),
                controller: Some(true),
                ..Default::default()
            }]),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("index".into(), index.to_string())])),
        ..Default::default()
    }
}

/// Brings a live `App`'s children to `spec.replicas`; behind the finalizer, so that a deleted
/// `App`'s children are deleted before it goes.
async fn reconcile(
    request: Request<App>,
    ctx: Arc<Ctx>,
) -> Result<Action, FinalizerError<kube_client::Error>> {
    let Target::Live(app) = &request.target else {
        // Gone from the server: it went only once its cleanup had run.
        return Ok(Action::await_change());
    };
    let ns = app.metadata.namespace.as_deref().unwrap_or("default");
    let apps: Api<App> = Api::namespaced(ctx.client.clone(), ns);
    finalizer(&apps, FINALIZER, Arc::clone(app), |step| async move {
        match step {
            Finalize::Apply(app) => scale(&app, &ctx).await,
            Finalize::Cleanup(app) => clean_up(&app, &ctx).await,
        }
    })
    .await
}

/// Creates the missing children, repairs the drifted, deletes the extra — reading the cache,
/// which may be behind: a create of a child that exists is a 409, a repair of a changed child
/// too, and both are retried with backoff on a fresher cache.
async fn scale(app: &App, ctx: &Ctx) -> Result<Action, kube_client::Error> {
    let ns = app.metadata.namespace.as_deref().unwrap_or("default");
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), ns);
    let uid = app.metadata.uid.as_deref().unwrap_or_default();
    let children = ctx
        .config_maps
        .by_index(OWNER_UID_INDEX, uid)
        .unwrap_or_default();
    let wanted = app.spec.replicas;
    for index in 0..wanted {
        let want = desired(app, index);
        let name = want.metadata.name.as_deref().unwrap_or_default();
        match children
            .iter()
            .find(|c| c.metadata.name.as_deref() == Some(name))
        {
            None => {
                drop(api.create(&PostParams::default(), &want).await?);
                record(ctx, app, "Created", format!("created {name}")).await;
            }
            Some(have) if have.data != want.data => {
                let mut repaired = want.clone();
                // Optimistic concurrency: a stale cache is a 409, retried with backoff.
                repaired.metadata.resource_version = have.metadata.resource_version.clone();
                drop(api.replace(name, &PostParams::default(), &repaired).await?);
                record(ctx, app, "Repaired", format!("repaired {name}")).await;
            }
            Some(_) => {}
        }
    }
    for extra in children.iter().filter(|c| {
        let name = c.metadata.name.as_deref().unwrap_or_default();
        !(0..wanted).any(|i| desired(app, i).metadata.name.as_deref() == Some(name))
    }) {
        let name = extra.metadata.name.as_deref().unwrap_or_default();
        drop(api.delete(name, &DeleteParams::default()).await?);
        record(ctx, app, "Deleted", format!("deleted {name}")).await;
    }
    Ok(Action::await_change())
}

/// Deletes every child of a deleted `App`. Not from the cache: a child created a moment ago
/// may not be in it yet, and once the finalizer is gone nothing would ever delete that child.
/// So a consistent list from the server, by label; a child already gone is fine (the cleanup
/// runs again if the finalizer's removal fails).
async fn clean_up(app: &App, ctx: &Ctx) -> Result<Action, kube_client::Error> {
    let ns = app.metadata.namespace.as_deref().unwrap_or("default");
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), ns);
    let name = app.metadata.name.as_deref().unwrap_or_default();
    let uid = app.metadata.uid.as_deref().unwrap_or_default();
    let children = api
        .list(&ListParams::default().labels(&format!("{APP_LABEL}={name}")))
        .await?;
    for child in children.items.iter().filter(|c| {
        c.metadata
            .owner_references
            .iter()
            .flatten()
            .any(|r| r.uid == uid)
    }) {
        let child = child.metadata.name.as_deref().unwrap_or_default();
        match api.delete(child, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube_client::Error::Api(status)) if status.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    record(
        ctx,
        app,
        "CleanedUp",
        format!("deleted {} children", children.items.len()),
    )
    .await;
    Ok(Action::await_change())
}

/// Publishes a `Normal` Event about `app`. Events are best effort: a failure is reported, not
/// retried, and does not fail the reconcile.
async fn record(ctx: &Ctx, app: &App, reason: &str, note: String) {
    if ctx.verbose {
        let ns = app.metadata.namespace.as_deref().unwrap_or_default();
        let name = app.metadata.name.as_deref().unwrap_or_default();
        println!("App {ns}/{name}: {note}");
    }
    let spec = EventSpec {
        type_: EventType::Normal,
        reason: reason.into(),
        action: "Reconcile".into(),
        note: Some(note),
        related: None,
    };
    let published = ctx.recorder.publish(&spec, &app.object_ref(&())).await;
    if published.is_err() {
        let mut lost = LOST_EVENTS.lock().unwrap_or_else(|e| e.into_inner());
        lost.push(reason.to_owned());
    }
    match published {
        Ok(()) => {}
        Err(kube_client::Error::Api(status)) => {
            println!(
                "an Event about {:?} was lost: {}",
                app.metadata.name, status.message
            );
        }
        Err(e) => println!("an Event about {:?} was lost: {e}", app.metadata.name),
    }
}

/// Whether the world on the server is what the Apps ask for: each existing App has exactly its
/// children, with the data it wants, and no ConfigMap is owned by a App that is gone.
fn converged(
    server: &ApiServer,
    apps: &ResourceInfo,
) -> Result<bool, Box<dyn std::error::Error + Send + Sync>> {
    let (config_maps, _) = server.list::<ConfigMap>(None)?;
    let mut ok = true;
    let mut uids = Vec::new();
    for name in NAMES {
        let Ok(app) = server.get_value(apps, Some("default"), name) else {
            continue; // deleted
        };
        let app: App = serde_json::from_value(app)?;
        // Still being deleted: its cleanup has not finished.
        ok &= app.metadata.deletion_timestamp.is_none();
        let uid = app.metadata.uid.clone().unwrap_or_default();
        let children: Vec<_> = config_maps
            .iter()
            .filter(|c| {
                c.metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .any(|r| r.uid == uid)
            })
            .collect();
        let want: Vec<_> = (0..app.spec.replicas).map(|i| desired(&app, i)).collect();
        ok &= children.len() == want.len()
            && children.iter().all(|c| {
                want.iter()
                    .any(|w| w.metadata.name == c.metadata.name && w.data == c.data)
            });
        uids.push(uid);
    }
    // No orphan: every owned ConfigMap's owner exists.
    ok &= config_maps
        .iter()
        .flat_map(|c| c.metadata.owner_references.iter().flatten())
        .all(|r| uids.contains(&r.uid));
    Ok(ok)
}

/// Waits (up to 30 s) until the world has converged.
async fn wait_converged(server: &ApiServer, apps: &ResourceInfo, what: &str) -> Result<(), String> {
    tokio::time::timeout(Duration::from_secs(30), async {
        while !converged(server, apps).unwrap_or(false) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .map_err(|_| format!("the world did not converge: {what}"))
}

const NAMES: [&str; 3] = ["alpha", "beta", "gamma"];

/// One replica of the controller: its own client (its identity to the server), factory,
/// caches and controller; with `ha`, behind a leader election on the Lease `app-controller`.
struct Replica {
    name: String,
    factory: KubeInformerFactory,
    elector: Option<LeaderElector>,
    stop: CancellationToken,
    running: tokio::task::JoinHandle<Result<(), RuntimeError>>,
}

impl Replica {
    /// A replica on the simulator: its client sends its name as its token, the identity the
    /// simulator's faults address.
    fn on_simulator(server: &ApiServer, name: &str, ha: bool) -> Result<Self, BoxError> {
        let mut config = kube_client::Config::new(server.url().parse()?);
        config.auth_info.token = Some(name.to_owned().into()); // who the server takes us for
        Self::start(kube_client::Client::try_from(config)?, name, ha, false)
    }

    fn start(
        client: kube_client::Client,
        name: &str,
        ha: bool,
        verbose: bool,
    ) -> Result<Self, BoxError> {
        let factory = KubeInformerFactory::new(KubeSource::new(client.clone()));
        let app_informer = factory.informer::<App>();
        let config_map_informer = factory.informer::<ConfigMap>();
        app_informer.add_index(UID_INDEX, uid_index_func::<App>())?;
        config_map_informer.add_index(OWNER_UID_INDEX, owner_uid_index_func::<ConfigMap>())?;
        factory.start()?;

        // The controller: Apps, owning ConfigMaps (a ConfigMap's change wakes its App). An App's
        // update is reconciled when its spec (generation) or its finalizers changed: not for a
        // change of its labels, say. The finalizers count too, or the reconcile after the
        // finalizer is added would never come.
        let owners = app_informer.lister();
        let mut controller = Controller::new(app_informer.clone())
            .owns(config_map_informer.clone(), move |cm: &ConfigMap| {
                owner_keys(&owners, cm)
            })
            .predicate(|old: &App, new: &App| {
                generation_changed(old, new) || finalizers_changed(old, new)
            })
            .concurrency(2);
        let elector = if ha {
            // Short timings so the example runs in seconds; the defaults are 15 s, 10 s, 2 s.
            let lease = KubeLease::new(client.clone(), "default", "app-controller");
            let timings = ElectionConfig::new(name).timings(
                Duration::from_secs(2),
                Duration::from_millis(1200),
                Duration::from_millis(300),
            );
            let elector = LeaderElector::new(lease, timings)?;
            controller = controller.leader_election(elector.clone());
            Some(elector)
        } else {
            None
        };
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: "example.informers.dev/app-controller".into(),
                instance: Some(name.to_owned()),
            },
        );
        let ctx = Arc::new(Ctx {
            client,
            config_maps: config_map_informer.lister(),
            recorder,
            verbose,
        });
        let stop = CancellationToken::new();
        let replica = name.to_owned();
        let running =
            tokio::spawn(
                controller.run(stop.clone(), ctx, reconcile, move |request, error, _| {
                    println!(
                        "{replica}: reconcile of {} failed ({}); backing off",
                        request.key,
                        short(error)
                    );
                    Action::backoff()
                }),
            );
        Ok(Self {
            name: name.to_owned(),
            factory,
            elector,
            stop,
            running,
        })
    }

    fn leads(&self) -> bool {
        self.elector.as_ref().is_some_and(LeaderElector::is_leader)
    }

    /// A graceful stop: reconciles finish, the lease is released, the informers stop.
    async fn stop(self) -> Result<(), BoxError> {
        self.stop.cancel();
        self.running.await??;
        self.factory.shutdown().await?;
        Ok(())
    }

    /// A crash: everything of the replica is dropped at once, nothing is released.
    async fn crash(self) -> Result<(), BoxError> {
        self.running.abort();
        let _ = self.running.await;
        self.factory.shutdown().await?;
        Ok(())
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// An error in a line: the API server's message rather than the whole Status.
fn short(error: &FinalizerError<kube_client::Error>) -> String {
    match error {
        FinalizerError::Apply(kube_client::Error::Api(status))
        | FinalizerError::Cleanup(kube_client::Error::Api(status))
        | FinalizerError::Add(kube_client::Error::Api(status))
        | FinalizerError::Remove(kube_client::Error::Api(status)) => status.message.clone(),
        other => other.to_string(),
    }
}

/// Waits (up to 30 s) until one of `replicas` other than `not` leads; returns its index.
async fn new_leader(replicas: &[Replica], not: Option<usize>) -> Result<usize, String> {
    tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            if let Some(i) = (0..replicas.len()).find(|&i| Some(i) != not && replicas[i].leads()) {
                return i;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .map_err(|_| "no replica took the lead".to_owned())
}

/// The command line: `--replicas N` (default 1), `--cluster`, `--seconds N` (with
/// `--cluster`: stop after N seconds instead of at Ctrl-C).
struct Args {
    replicas: usize,
    cluster: bool,
    seconds: Option<u64>,
}

impl Args {
    fn parse() -> Result<Self, BoxError> {
        const USAGE: &str = "usage: controller [--replicas N] [--cluster [--seconds N]]";
        let mut parsed = Self {
            replicas: 1,
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
                "--seconds" => {
                    let n = args.next().and_then(|n| n.parse().ok());
                    parsed.seconds = Some(n.ok_or("--seconds takes a whole number")?);
                }
                "--cluster" => parsed.cluster = true,
                other => return Err(format!("unknown argument {other:?}; {USAGE}").into()),
            }
        }
        Ok(parsed)
    }
}

/// The `App` CustomResourceDefinition, for a cluster that does not serve Apps yet.
fn app_crd() -> Result<CustomResourceDefinition, serde_json::Error> {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("apps.{GROUP}")},
        "spec": {
            "group": GROUP,
            "names": {"kind": "App", "plural": "apps", "singular": "app", "listKind": "AppList"},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {
                    "type": "object",
                    "properties": {"replicas": {"type": "integer", "minimum": 0}},
                }}}},
            }],
        },
    }))
}

/// Makes sure the cluster serves Apps: installs the CRD if it does not, and waits (up to
/// 30 s) until it does.
async fn serve_apps(client: &kube_client::Client) -> Result<(), BoxError> {
    let apps: Api<App> = Api::all(client.clone());
    let served = || async { apps.list(&ListParams::default().limit(1)).await.is_ok() };
    if served().await {
        return Ok(());
    }
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    match crds.create(&PostParams::default(), &app_crd()?).await {
        Ok(_) => println!("installed the CustomResourceDefinition apps.{GROUP}"),
        Err(kube_client::Error::Api(status)) if status.code == 409 => {}
        Err(e) => return Err(format!("cannot install the App CRD: {e}").into()),
    }
    tokio::time::timeout(Duration::from_secs(30), async {
        while !served().await {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
    .map_err(|_| "the cluster does not serve Apps 30 s after the CRD was installed".into())
}

/// `--cluster`: the controller's replicas against the current kubeconfig's cluster, until
/// Ctrl-C or `seconds`.
async fn run_on_cluster(replicas: usize, seconds: Option<u64>) -> Result<(), BoxError> {
    let config = kube_client::Config::infer().await?;
    println!("cluster: {}", config.cluster_url);
    serve_apps(&kube_client::Client::try_from(config.clone())?).await?;
    let ha = replicas > 1;
    let mut running = Vec::new();
    for i in 0..replicas {
        // A Lease holder's identity must be unique across processes.
        let name = format!("controller-{}-{i}", std::process::id());
        let client = kube_client::Client::try_from(config.clone())?;
        running.push(Replica::start(client, &name, ha, true)?);
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
            _ = status.tick() => {
                for replica in &running {
                    let stats = replica.factory.stats();
                    let cached: Vec<String> =
                        stats.iter().map(|s| format!("{} {}", s.objects, s.name)).collect();
                    let role = if !ha { "" } else if replica.leads() { ", leading" } else { ", standing by" };
                    println!("{}{role}: cached {}", replica.name, cached.join(", "));
                }
            }
        }
    }
    for replica in running {
        replica.stop().await?;
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let Args {
        replicas,
        cluster,
        seconds,
    } = Args::parse()?;
    if cluster {
        return run_on_cluster(replicas, seconds).await;
    }
    let apps = ResourceInfo::custom(GROUP, "v1", "App", "apps", true);
    let server = ApiServer::start(
        Config::default()
            .with_core_types()
            .register::<Event>()
            .register_info(apps.clone()),
    )
    .await?;
    let app = |name: &str, replicas: u32| {
        serde_json::json!({"apiVersion": format!("{GROUP}/v1"), "kind": "App",
            "metadata": {"name": name, "namespace": "default"}, "spec": {"replicas": replicas}})
    };
    for (name, replicas) in NAMES.into_iter().zip([2, 3, 1]) {
        server.create_value(&apps, app(name, replicas))?;
    }
    let ha = replicas > 1;
    let mut running = Vec::new();
    for i in 0..replicas {
        running.push(Replica::on_simulator(
            &server,
            &format!("controller-{i}"),
            ha,
        )?);
    }

    wait_converged(&server, &apps, "initial").await?;
    println!("converged: alpha has 2 children, beta 3, gamma 1");

    // Changes, with faults: a failing create, a dropped watch, a drifted child.
    server
        .faults()
        .fail_next(Verb::Create, 2, Failure::internal("injected"));
    server.patch_value(
        &apps,
        Some("default"),
        "beta",
        &serde_json::json!({"spec": {"replicas": 5}}),
    )?;
    server.faults().drop_watches();
    server.patch::<ConfigMap>(
        Some("default"),
        "alpha-1",
        &serde_json::json!({"data": {"index": "drifted"}}),
    )?;
    server.patch_value(
        &apps,
        Some("default"),
        "alpha",
        &serde_json::json!({"spec": {"replicas": 1}}),
    )?;
    // Deleted as a user deletes it (the API, not the simulator's handle, which deletes at once
    // as etcd would): held by the finalizer until the controller has cleaned up.
    let user = kube_client::Client::try_from(kube_client::Config::new(server.url().parse()?))?;
    let gone = Api::<App>::namespaced(user, "default")
        .delete("gamma", &DeleteParams::default())
        .await?;
    assert!(
        gone.is_left(),
        "gamma is held by its finalizer, not deleted at once"
    );
    wait_converged(&server, &apps, "after the changes").await?;
    println!(
        "converged again: beta scaled to 5, alpha to 1 (its drifted child repaired first), gamma's child deleted with it"
    );

    if ha {
        // The leader cut off from the server (its requests fail): another takes over.
        let leader = new_leader(&running, None).await?;
        let cut = running[leader].name.clone();
        server
            .faults()
            .isolate(&cut, Isolation::Fail(Failure::unavailable()));
        let next = new_leader(&running, Some(leader)).await?;
        server.patch_value(
            &apps,
            Some("default"),
            "alpha",
            &serde_json::json!({"spec": {"replicas": 4}}),
        )?;
        wait_converged(&server, &apps, "after the leader was cut off").await?;
        println!(
            "{cut} cut off: {} took over and scaled alpha to 4",
            running[next].name
        );
        server.faults().heal(&cut);

        // The new leader crashes: another takes over once the lease expires.
        let crashed = running.remove(next);
        let name = crashed.name.clone();
        crashed.crash().await?;
        let after = new_leader(&running, None).await?;
        server.patch_value(
            &apps,
            Some("default"),
            "beta",
            &serde_json::json!({"spec": {"replicas": 2}}),
        )?;
        wait_converged(&server, &apps, "after the leader crashed").await?;
        println!(
            "{name} crashed: {} took over and scaled beta to 2",
            running[after].name
        );
    }

    // What the controller said it did, as `kubectl events` would show it.
    let (events, _) = server.list::<Event>(Some("default"))?;
    let mut reasons = BTreeMap::<String, i32>::new();
    for event in &events {
        let count = event.series.as_ref().map_or(1, |s| s.count);
        *reasons
            .entry(event.reason.clone().unwrap_or_default())
            .or_default() += count;
    }
    println!("Events on the Apps: {reasons:?}");
    // The injected create failures may hit an Event instead of a child: a lost Event is not
    // asked for, but one never published at all is an error.
    let lost = LOST_EVENTS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    if !reasons.contains_key("CleanedUp") && !lost.iter().any(|r| r == "CleanedUp") {
        return Err("no Event says gamma's children were cleaned up".into());
    }

    for replica in running {
        replica.stop().await?;
    }
    server.shutdown().await;
    Ok(())
}
