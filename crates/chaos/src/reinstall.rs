//! Custom resources that come and go: a seeded run in which the CRD of a custom resource is
//! deleted and installed again ([`AppStep::Uninstall`], [`AppStep::Install`]: the simulator's
//! `unregister` and `register_info`) between writes of its objects and the scenario's faults,
//! while a factory's informer of it, with a handler keeping a view of its own, follows.
//!
//! The check at the end: the informer never stopped, the server serves the resource, and
//! within [`SETTLE_BOUND`] the cache holds exactly the server's objects (each at the server's
//! resourceVersion) and the handler's view is the cache.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use informer::{HandlerOptions, ResourceEventHandler, SharedIndexInformer};
use informer_apiserver::{ApiServer, ResourceInfo};
use informer_kube::{DynamicResource, KubeInformerFactory, KubeSource};
use informer_reflector::Availability;
use informer_store::Everything;
use kube::api::{Api, DynamicObject, GroupVersionKind, ListParams};
use kube::discovery::ApiResource;
use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

use crate::runner::{SETTLE_BOUND, start_server};
use crate::scenario::{Fault, Generator, Scenario, ServerSettings, window_end};
use crate::stack::{calm, client, configure, inject};

/// The namespace of every object.
const NAMESPACE: &str = "apps";
/// How many object names a run uses (`app-0` .. `app-11`): names come back after a delete.
const NAMES: usize = 12;
/// How often the informer lists the resource while it is not served.
const NOT_SERVED_POLL: Duration = Duration::from_millis(50);
/// The most times a run deletes the CRD.
const MAX_UNINSTALLS: usize = 4;

/// The custom resource, as the simulator serves it.
pub fn apps_info() -> ResourceInfo {
    ResourceInfo::custom("chaos.informers.dev", "v1", "App", "apps", true)
}

/// The custom resource, as the factory names it.
pub fn apps() -> DynamicResource {
    DynamicResource::namespaced(apps_api_resource())
}

/// The custom resource, as kube-client's `Api` names it.
fn apps_api_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("chaos.informers.dev", "v1", "App"),
        "apps",
    )
}

/// One step of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AppStep {
    /// Creates `app-<name>` (free at this point) with `spec.value`.
    Create {
        /// The name's number.
        name: usize,
        /// Its value.
        value: u64,
    },
    /// Sets an existing object's `spec.value`.
    Update {
        /// The name's number.
        name: usize,
        /// Its new value.
        value: u64,
    },
    /// Deletes an existing object.
    Delete {
        /// The name's number.
        name: usize,
    },
    /// The CRD is deleted: every object is deleted, the resource is no longer served.
    Uninstall,
    /// The CRD is installed again: the resource is served, empty.
    Install,
    /// A fault of the informers' scenarios.
    Fault(Fault),
    /// Let the network run for this many milliseconds.
    Pause(u64),
}

/// A whole run, derived from a seed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReinstallPlan {
    /// The seed everything was drawn from.
    pub seed: u64,
    /// Steps, in order; the CRD is installed at the start and at the end.
    pub steps: Vec<AppStep>,
}

impl ReinstallPlan {
    /// The plan of `seed` with `steps` steps (and the closing install, if needed). A fault
    /// that opens a window (bookmarks off, slow streams) is closed a few steps later.
    pub fn with_steps(seed: u64, steps: usize) -> Self {
        let mut rng = StdRng::seed_from_u64(seed ^ 0xc4d0_7e1a_57a1_0005);
        let mut faults = Generator::new(seed ^ 0xc4d0_7e1a_57a1_0006, 1);
        let mut live = BTreeSet::new();
        let (mut installed, mut uninstalls, mut back_at) = (true, 0, 0);
        let mut closing: Vec<(usize, Fault)> = Vec::new();
        let mut plan = Vec::with_capacity(steps + 1);
        for i in 0..steps {
            let roll = rng.random_range(0..100);
            let step = if let Some(at) = closing.iter().position(|(due, _)| *due <= i) {
                AppStep::Fault(closing.swap_remove(at).1)
            } else if !installed && i >= back_at {
                installed = true;
                AppStep::Install
            } else if installed && roll < 5 && uninstalls < MAX_UNINSTALLS {
                (installed, uninstalls) = (false, uninstalls + 1);
                back_at = i + rng.random_range(2..10);
                live.clear();
                AppStep::Uninstall
            } else if roll < 15 {
                let fault = faults.fault();
                if let Some(end) = window_end(&fault) {
                    closing.push((i + rng.random_range(2..12), end));
                }
                AppStep::Fault(fault)
            } else if !installed {
                // Long enough, over the steps of its absence, for lists to find it missing.
                AppStep::Pause(rng.random_range(10..=40))
            } else if roll < 35 {
                AppStep::Pause(rng.random_range(5..=30))
            } else {
                write(&mut rng, &mut live)
            };
            plan.push(step);
        }
        plan.extend(closing.into_iter().map(|(_, end)| AppStep::Fault(end)));
        if !installed {
            plan.push(AppStep::Install);
        }
        Self { seed, steps: plan }
    }

    /// How many times the CRD is deleted.
    pub fn uninstalls(&self) -> usize {
        self.steps
            .iter()
            .filter(|s| **s == AppStep::Uninstall)
            .count()
    }
}

/// A write valid where it stands, given the names that exist (`live`, kept up to date).
fn write(rng: &mut StdRng, live: &mut BTreeSet<usize>) -> AppStep {
    let value = rng.random_range(0..1_000);
    let name = rng.random_range(0..NAMES);
    if !live.contains(&name) {
        live.insert(name);
        return AppStep::Create { name, value };
    }
    if rng.random_bool(0.3) {
        live.remove(&name);
        AppStep::Delete { name }
    } else {
        AppStep::Update { name, value }
    }
}

/// What a passing run did.
#[derive(Debug, Clone, Default)]
pub struct ReinstallOutcome {
    /// The seed.
    pub seed: u64,
    /// Writes made.
    pub writes: usize,
    /// Times the CRD was deleted.
    pub uninstalls: usize,
    /// Faults fired.
    pub faults: usize,
    /// Deletions the handler was told of.
    pub deletions: u64,
    /// Steps at which the informer found its resource not served.
    pub not_served_steps: usize,
    /// Objects on the server at the end.
    pub objects: usize,
    /// From the end of the steps to convergence.
    pub settled_in: Duration,
}

impl fmt::Display for ReinstallOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "seed {} passed: {} writes, {} CRD deletions ({} steps seen not served), {} faults, \
             {} deletions handled, {} objects at the end, settled in {:.2?}",
            self.seed,
            self.writes,
            self.uninstalls,
            self.not_served_steps,
            self.faults,
            self.deletions,
            self.objects,
            self.settled_in
        )
    }
}

/// A handler's view of the cache: each key's resourceVersion, and the deletions it heard.
#[derive(Default)]
struct View {
    objects: Mutex<BTreeMap<String, String>>,
    deletions: Mutex<u64>,
}

impl ResourceEventHandler<DynamicObject> for View {
    fn on_add(&self, key: &str, obj: &Arc<DynamicObject>, _initial: bool) {
        self.objects.lock().insert(key.to_owned(), version(obj));
    }

    fn on_update(&self, key: &str, _old: &Arc<DynamicObject>, new: &Arc<DynamicObject>) {
        self.objects.lock().insert(key.to_owned(), version(new));
    }

    fn on_delete(&self, key: &str, _obj: &Arc<DynamicObject>, _final_state_unknown: bool) {
        self.objects.lock().remove(key);
        *self.deletions.lock() += 1;
    }
}

fn version(obj: &DynamicObject) -> String {
    obj.metadata.resource_version.clone().unwrap_or_default()
}

/// Each object's key and resourceVersion.
fn versions<'a>(objects: impl Iterator<Item = &'a DynamicObject>) -> BTreeMap<String, String> {
    objects
        .map(|o| {
            let name = o.metadata.name.as_deref().unwrap_or_default();
            (format!("{NAMESPACE}/{name}"), version(o))
        })
        .collect()
}

/// Runs the plan of `seed` with `steps` steps against a simulator of its own, with the
/// server's and the informers' settings of the informers' scenario of the same seed; the
/// problems found, each naming the seed, if it fails.
pub async fn run_reinstall(seed: u64, steps: usize) -> Result<ReinstallOutcome, Vec<String>> {
    let plan = ReinstallPlan::with_steps(seed, steps);
    let settings = Scenario::with_steps(seed, 0);
    let server = start_server(&settings)
        .await
        .map_err(|e| vec![format!("seed {seed}: {e}")])?;
    server.register_info(apps_info());
    let outcome = drive(&plan, &settings.server, &server).await;
    server.shutdown().await;
    outcome.map_err(|problems| {
        problems
            .into_iter()
            .map(|p| format!("seed {seed}: {p}"))
            .collect()
    })
}

/// The command that replays the custom-resource scenario of one seed.
pub fn reinstall_replay_command(seed: u64, steps: usize) -> String {
    format!("cargo run --release -p informer-chaos -- --reinstall --seed {seed} --steps {steps}")
}

/// A factory whose informers of custom resources list and watch as the informers' scenario
/// of the seed does (`settings`), looking for a resource not served every
/// [`NOT_SERVED_POLL`].
fn factory(client: kube::Client, settings: ServerSettings) -> KubeInformerFactory {
    KubeInformerFactory::new(KubeSource::new(client)).configure_for::<DynamicResource>(move |b| {
        let min_watch_timeout = Duration::from_secs(settings.min_watch_timeout_secs);
        configure(
            b,
            min_watch_timeout,
            settings.streaming_list,
            settings.relist_by_page,
        )
        .reflector_config(|r| r.with_not_served_poll(NOT_SERVED_POLL))
    })
}

async fn drive(
    plan: &ReinstallPlan,
    settings: &ServerSettings,
    server: &ApiServer,
) -> Result<ReinstallOutcome, Vec<String>> {
    let client = client(server).map_err(|e| vec![e])?;
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), NAMESPACE, &apps_api_resource());
    let factory = factory(client, *settings);
    let informer = factory.informer_for(&apps());
    let view = Arc::new(View::default());
    informer
        .add_event_handler(Arc::clone(&view), HandlerOptions::new())
        .map_err(|e| vec![format!("registering the handler: {e}")])?;
    factory.start().map_err(|e| vec![e.to_string()])?;

    let mut outcome = ReinstallOutcome {
        seed: plan.seed,
        uninstalls: plan.uninstalls(),
        ..ReinstallOutcome::default()
    };
    for step in &plan.steps {
        if informer.availability() == Availability::NotServed {
            outcome.not_served_steps += 1;
        }
        if let AppStep::Pause(ms) = step {
            tokio::time::sleep(Duration::from_millis(*ms)).await;
            continue;
        }
        if let Err(e) = apply(server, step, &mut outcome) {
            let _ = factory.shutdown().await;
            return Err(vec![e]);
        }
        tokio::task::yield_now().await;
    }
    calm(server);

    let mut problems = Vec::new();
    let begun = Instant::now();
    match converge(&api, &informer, &view).await {
        Ok(objects) => outcome.objects = objects,
        Err(differences) => {
            problems.push(format!(
                "no convergence within {SETTLE_BOUND:?} after the steps:"
            ));
            problems.extend(differences);
        }
    }
    outcome.settled_in = begun.elapsed();
    outcome.deletions = *view.deletions.lock();
    if let Err(e) = factory.shutdown().await {
        problems.push(format!("the informer ended with an error: {e}"));
    }
    if problems.is_empty() {
        Ok(outcome)
    } else {
        Err(problems)
    }
}

/// Makes one step happen (a pause is the caller's), counting it in `outcome`.
fn apply(server: &ApiServer, step: &AppStep, outcome: &mut ReinstallOutcome) -> Result<(), String> {
    let object = |name: usize, value: u64| {
        json!({"metadata": {"name": format!("app-{name}"), "namespace": NAMESPACE},
               "spec": {"value": value}})
    };
    let failed = |e: informer_apiserver::Error| format!("{step:?} failed: {e}");
    match step {
        AppStep::Create { name, value } => {
            server
                .create_value(&apps_info(), object(*name, *value))
                .map_err(failed)?;
            outcome.writes += 1;
        }
        AppStep::Update { name, value } => {
            let patch = json!({"spec": {"value": value}});
            let name = format!("app-{name}");
            server
                .patch_value(&apps_info(), Some(NAMESPACE), &name, &patch)
                .map_err(failed)?;
            outcome.writes += 1;
        }
        AppStep::Delete { name } => {
            let name = format!("app-{name}");
            server
                .delete_value(&apps_info(), Some(NAMESPACE), &name)
                .map_err(failed)?;
            outcome.writes += 1;
        }
        AppStep::Uninstall => {
            server.unregister(&apps_info()).map_err(failed)?;
        }
        AppStep::Install => {
            server.register_info(apps_info());
        }
        AppStep::Fault(fault) => {
            inject(server, fault);
            outcome.faults += 1;
        }
        AppStep::Pause(_) => {}
    }
    Ok(())
}

/// Waits until the cache holds the server's objects and the view is the cache; how many
/// objects the server holds, or what still differs after [`SETTLE_BOUND`].
async fn converge(
    api: &Api<DynamicObject>,
    informer: &SharedIndexInformer<DynamicObject>,
    view: &View,
) -> Result<usize, Vec<String>> {
    let deadline = Instant::now() + SETTLE_BOUND;
    loop {
        let differences = differences(api, informer, view).await;
        if differences.is_empty() {
            return Ok(informer.lister().len());
        }
        if Instant::now() >= deadline {
            return Err(differences);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// What differs now between the server, the cache and the view, and whether the informer is
/// still running with its resource served.
async fn differences(
    api: &Api<DynamicObject>,
    informer: &SharedIndexInformer<DynamicObject>,
    view: &View,
) -> Vec<String> {
    let mut differences = Vec::new();
    if informer.is_stopped() {
        differences.push("the informer stopped".to_owned());
    }
    if informer.availability() != Availability::Served {
        differences.push(format!("availability {:?}", informer.availability()));
    }
    let server = match api.list(&ListParams::default()).await {
        Ok(list) => versions(list.items.iter()),
        Err(e) => return vec![format!("listing the server: {e}")],
    };
    let cache = versions(informer.lister().list(&Everything).iter().map(|o| &**o));
    if cache != server {
        differences.push(format!("cache {cache:?} != server {server:?}"));
    }
    let seen = view.objects.lock().clone();
    if seen != cache {
        differences.push(format!("handler view {seen:?} != cache {cache:?}"));
    }
    differences
}
