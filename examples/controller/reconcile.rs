//! The controller's reconcile: an App's children applied, its status written, its cleanup
//! behind a finalizer; and what it tells (Events) and counts.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use informers::k8s_openapi::api::core::v1::ConfigMap;
use informers::kube::OWNER_UID_INDEX;
use informers::kube_client::api::{DeleteParams, ListParams, Patch, PatchParams};
use informers::kube_client::{self, Api, Resource as _};
use informers::prelude::*;
use informers::runtime::events::{EventSpec, EventType, Recorder};
use informers::runtime::{
    Client, ClientError, Finalize, FinalizerError, ReconcileObserver, ReconcileOutcome, Request,
    WritesAwaited, finalizer,
};
use parking_lot::Mutex;

use crate::app::{APP_LABEL, App, AppStatus, CONTROLLER, GROUP, as_wanted, child_name, desired};

/// What reconcile needs: the client (the caches it reads, the API it writes to), the event
/// recorder, and the replica's tally.
pub(crate) struct Ctx {
    pub(crate) client: Client,
    pub(crate) recorder: Recorder,
    pub(crate) tally: Arc<Tally>,
    /// Print each action (on a cluster, where nothing else says what happened).
    pub(crate) verbose: bool,
}

/// The finalizer that holds a deleted `App` until its children are gone.
const FINALIZER: &str = "example.informers.dev/children";

/// The reasons of the Events that could not be published (the faults this example injects can
/// fail one), across every replica of this process: the final check does not ask for those.
pub(crate) static LOST_EVENTS: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// What one replica counted, for the final check: the children it created, and its reconciles'
/// waits for their own writes (the controller's observer).
#[derive(Default)]
pub(crate) struct Tally {
    /// The UIDs of the children its applies created.
    created: Mutex<HashSet<String>>,
    /// Applies of a child missing from its cache that answered with a child it had created
    /// already: its cache did not show its own write.
    pub(crate) created_twice: AtomicU64,
    /// Reconciles that waited for the caches to show their key's previous writes.
    pub(crate) waits: AtomicU64,
    /// Of those, the ones that ran on a stale read, the wait's time up.
    pub(crate) stale: AtomicU64,
    /// The longest of the waits.
    pub(crate) longest: Mutex<Duration>,
}

impl Tally {
    /// Notes the answer to the apply of a child the cache did not hold.
    fn created(&self, uid: &str) {
        if !self.created.lock().insert(uid.to_owned()) {
            self.created_twice.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl ReconcileObserver for Tally {
    fn reconciled(&self, _outcome: ReconcileOutcome) {}

    fn writes_awaited(&self, wait: WritesAwaited) {
        self.waits.fetch_add(1, Ordering::Relaxed);
        if wait.timed_out {
            self.stale.fetch_add(1, Ordering::Relaxed);
        }
        let mut longest = self.longest.lock();
        *longest = (*longest).max(wait.waited);
    }
}

/// Brings a live `App`'s children to its spec and its status to its children; behind the
/// finalizer, so that a deleted `App`'s children are deleted before it goes.
pub(crate) async fn reconcile(
    request: Request<App>,
    ctx: Arc<Ctx>,
) -> Result<Action, FinalizerError<ClientError>> {
    let Target::Live(app) = &request.target else {
        // Gone from the server: it went only once its cleanup had run.
        return Ok(Action::await_change());
    };
    let ns = app.metadata.namespace.as_deref().unwrap_or("default");
    let apps: Api<App> = Api::namespaced(ctx.client.kube().clone(), ns);
    let steps = Arc::clone(&ctx);
    let result = finalizer(&apps, FINALIZER, Arc::clone(app), |step| async move {
        match step {
            Finalize::Apply(app) => scale(&app, &steps).await,
            Finalize::Cleanup(app) => clean_up(&app, &steps).await,
        }
    })
    .await;
    if let Err(FinalizerError::Apply(error)) = &result
        && error.is_apply_conflict()
    {
        let fields = error.conflicting_fields().join(", ");
        let note = format!("another field manager owns {fields}");
        publish(&ctx, app, EventType::Warning, "ApplyConflict", note).await;
    }
    result
}

/// The error policy. An apply conflict is not retried: the same apply gets the same answer
/// until the other field manager lets go of its fields, so the App waits for a change (the
/// Warning Event above says why). Anything else is retried with the key's backoff.
pub(crate) fn on_error(
    replica: &str,
    request: &Request<App>,
    error: &FinalizerError<ClientError>,
) -> Action {
    if let FinalizerError::Apply(e) = error
        && e.is_apply_conflict()
    {
        let fields = e.conflicting_fields().join(", ");
        println!(
            "{replica}: {} conflicts with another field manager over {fields}; waiting for a change",
            request.key
        );
        return Action::await_change();
    }
    println!(
        "{replica}: reconcile of {} failed ({}); backing off",
        request.key,
        short(error)
    );
    Action::backoff()
}

/// Applies the children the cache lacks or shows drifted and deletes the extra; once the cache
/// shows every child in place, writes the status. The cache shows every write of this App's
/// earlier reconciles (the client recorded them, and the controller waited for them before
/// this reconcile began), so a reconcile that wrote asks to run again at once: that one begins
/// once the cache shows these writes, finds the children in place and writes the status.
async fn scale(app: &App, ctx: &Ctx) -> Result<Action, ClientError> {
    let uid = app.metadata.uid.as_deref().unwrap_or_default();
    let children = ctx.client.by_index::<ConfigMap>(OWNER_UID_INDEX, uid)?;
    let applied = apply_children(app, &children, ctx).await?;
    let deleted = delete_extra(app, &children, ctx).await?;
    if applied || deleted {
        return Ok(Action::requeue(Duration::ZERO));
    }
    write_status(app, children.len(), ctx).await?;
    Ok(Action::await_change())
}

/// Applies each child of `app` that `children` (the cache's) lacks or has drifted; whether it
/// applied any.
async fn apply_children(
    app: &App,
    children: &[Arc<ConfigMap>],
    ctx: &Ctx,
) -> Result<bool, ClientError> {
    let mut applied = false;
    for index in 0..app.spec.replicas {
        let want = desired(app, index);
        let name = want.metadata.name.as_deref().unwrap_or_default();
        let have = children
            .iter()
            .find(|c| c.metadata.name.as_deref() == Some(name));
        if have.is_some_and(|have| as_wanted(have, &want)) {
            continue;
        }
        // Server-side apply: the fields of `want` become the controller's, the child is created
        // if missing. `force` takes over any of them another manager has set: the controller
        // owns its children.
        let answer = ctx.client.apply(&want, CONTROLLER, true).await?;
        applied = true;
        if have.is_none() {
            ctx.tally
                .created(answer.metadata.uid.as_deref().unwrap_or_default());
            record(ctx, app, "Created", format!("created {name}")).await;
        } else {
            record(ctx, app, "Repaired", format!("repaired {name}")).await;
        }
    }
    Ok(applied)
}

/// Deletes the children in `children` (the cache's) that `app` does not want; whether there
/// were any.
async fn delete_extra(
    app: &App,
    children: &[Arc<ConfigMap>],
    ctx: &Ctx,
) -> Result<bool, ClientError> {
    let wanted: Vec<String> = (0..app.spec.replicas).map(|i| child_name(app, i)).collect();
    let mut deleted = false;
    for extra in children {
        let name = extra.metadata.name.as_deref().unwrap_or_default();
        if wanted.iter().any(|w| w == name) {
            continue;
        }
        deleted = true;
        let ns = extra.metadata.namespace.as_deref();
        match ctx
            .client
            .delete::<ConfigMap>(ns, name, &DeleteParams::default())
            .await
        {
            Ok(_) => record(ctx, app, "Deleted", format!("deleted {name}")).await,
            // Gone already (another replica's deletion the cache has not shown yet).
            Err(e) if not_found(&e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(deleted)
}

/// Applies the App's status through the `/status` subresource, unless the App (as the cache
/// shows it, with every status this controller wrote before) has it already.
async fn write_status(app: &App, children: usize, ctx: &Ctx) -> Result<(), ClientError> {
    let status = AppStatus {
        children: u32::try_from(children).unwrap_or(u32::MAX),
        observed_generation: app.metadata.generation.unwrap_or_default(),
    };
    if app.status.as_ref() == Some(&status) {
        return Ok(());
    }
    let name = app.metadata.name.as_deref().unwrap_or_default();
    let ns = app.metadata.namespace.as_deref();
    // The status alone, applied: these fields become the controller's. A status write takes no
    // new generation, so it wakes no reconcile: the predicate passes new generations only (and
    // finalizers).
    let apply = serde_json::json!({
        "apiVersion": format!("{GROUP}/v1"),
        "kind": "App",
        "metadata": {"name": name, "namespace": ns},
        "status": status,
    });
    let params = PatchParams::apply(CONTROLLER).force();
    ctx.client
        .patch_status::<App, _>(ns, name, &params, &Patch::Apply(&apply))
        .await?;
    if ctx.verbose {
        println!(
            "App {}/{name}: status: {} children, generation {}",
            ns.unwrap_or_default(),
            status.children,
            status.observed_generation
        );
    }
    Ok(())
}

/// Deletes every child of a deleted `App`. Not from the cache: a child created a moment ago
/// may not be in it yet, and once the finalizer is gone nothing would ever delete that child.
/// So a consistent list from the server, by label; a child already gone is fine (the cleanup
/// runs again if the finalizer's removal fails).
async fn clean_up(app: &App, ctx: &Ctx) -> Result<Action, ClientError> {
    let ns = app.metadata.namespace.as_deref().unwrap_or("default");
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.kube().clone(), ns);
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
        match ctx
            .client
            .delete::<ConfigMap>(Some(ns), child, &DeleteParams::default())
            .await
        {
            Ok(_) => {}
            Err(e) if not_found(&e) => {}
            Err(e) => return Err(e),
        }
    }
    let note = format!("deleted {} children", children.items.len());
    record(ctx, app, "CleanedUp", note).await;
    Ok(Action::await_change())
}

/// Whether the server answered 404 Not Found.
fn not_found(error: &ClientError) -> bool {
    error.status().is_some_and(|s| s.code == 404)
}

/// Publishes a `Normal` Event about `app`.
async fn record(ctx: &Ctx, app: &App, reason: &str, note: String) {
    publish(ctx, app, EventType::Normal, reason, note).await;
}

/// Publishes an Event about `app`. Events are best effort: a failure is reported, not
/// retried, and does not fail the reconcile.
async fn publish(ctx: &Ctx, app: &App, type_: EventType, reason: &str, note: String) {
    if ctx.verbose {
        let ns = app.metadata.namespace.as_deref().unwrap_or_default();
        let name = app.metadata.name.as_deref().unwrap_or_default();
        println!("App {ns}/{name}: {note}");
    }
    let spec = EventSpec {
        type_,
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

/// An error in a line: the API server's message rather than the whole Status.
fn short(error: &FinalizerError<ClientError>) -> String {
    let status = match error {
        FinalizerError::Apply(e) | FinalizerError::Cleanup(e) => e.status(),
        FinalizerError::Add(kube_client::Error::Api(s))
        | FinalizerError::Remove(kube_client::Error::Api(s)) => Some(&**s),
        _ => None,
    };
    status.map_or_else(|| error.to_string(), |s| s.message.clone())
}
