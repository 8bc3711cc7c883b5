//! What the example checks on the server: the world converged (children and statuses), and,
//! at the end, what the controller said (Events), counted (its waits for its own writes) and
//! owns (field managers).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use informers::apiserver::{ApiServer, ResourceInfo};
use informers::k8s_openapi::api::core::v1::ConfigMap;
use informers::k8s_openapi::api::events::v1::Event;

use crate::app::{App, AppStatus, CONTROLLER, as_wanted, desired};
use crate::reconcile::{LOST_EVENTS, Tally};
use crate::{BoxError, NAMES};

/// Whether the world on the server is what the Apps ask for: each existing App has exactly its
/// children, each as it wants it, and a status that says so for its current spec; no ConfigMap
/// is owned by an App that is gone.
fn converged(server: &ApiServer, apps: &ResourceInfo, names: &[&str]) -> Result<bool, BoxError> {
    let (config_maps, _) = server.list::<ConfigMap>(None)?;
    let mut ok = true;
    let mut uids = Vec::new();
    for &name in names {
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
                    .any(|w| w.metadata.name == c.metadata.name && as_wanted(c, w))
            });
        // The status the controller wrote: these children, for this spec.
        let status = AppStatus {
            children: u32::try_from(children.len())?,
            observed_generation: app.metadata.generation.unwrap_or_default(),
        };
        ok &= app.status.as_ref() == Some(&status);
        uids.push(uid);
    }
    // No orphan: every owned ConfigMap's owner exists.
    ok &= config_maps
        .iter()
        .flat_map(|c| c.metadata.owner_references.iter().flatten())
        .all(|r| uids.contains(&r.uid));
    Ok(ok)
}

/// Waits (up to 30 s) until the world of the Apps [`NAMES`] has converged.
pub(crate) async fn wait_converged(
    server: &ApiServer,
    apps: &ResourceInfo,
    what: &str,
) -> Result<(), String> {
    wait_apps_converged(server, apps, &NAMES, what).await
}

/// Waits (up to 30 s) until the world of the Apps `names` has converged.
pub(crate) async fn wait_apps_converged(
    server: &ApiServer,
    apps: &ResourceInfo,
    names: &[&str],
    what: &str,
) -> Result<(), String> {
    tokio::time::timeout(Duration::from_secs(30), async {
        while !converged(server, apps, names).unwrap_or(false) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .map_err(|_| format!("the world did not converge: {what}"))
}

/// The final check, once the world has converged: the Events, the statuses, the waits for
/// the controller's own writes, and who owns the fields of the child a user took over.
pub(crate) fn final_check(
    server: &ApiServer,
    apps: &ResourceInfo,
    tallies: &[Arc<Tally>],
) -> Result<(), BoxError> {
    events(server)?;
    let mut statuses = Vec::new();
    for name in NAMES {
        if let Ok(app) = server.get_value(apps, Some("default"), name) {
            let status = serde_json::from_value::<App>(app)?
                .status
                .unwrap_or_default();
            statuses.push(format!(
                "{name} {} (generation {})",
                status.children, status.observed_generation
            ));
        }
    }
    println!("the Apps' statuses (children): {}", statuses.join(", "));
    own_writes(tallies)?;
    // kubectl's forced apply took `.data.index` of alpha-0, the controller's took it back: its
    // field manager is the only one left (an entry without fields goes).
    let child: ConfigMap = server.get(Some("default"), "alpha-0")?;
    let managers: Vec<_> = child
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .map(|m| m.manager.as_deref().unwrap_or_default())
        .collect();
    if managers != [CONTROLLER] {
        return Err(format!(
            "alpha-0's fields are managed by {managers:?}, not by {CONTROLLER} alone"
        )
        .into());
    }
    println!("alpha-0's fields are the controller's again (managed by {CONTROLLER} alone)");
    Ok(())
}

/// What the controller said it did, as `kubectl events` would show it.
fn events(server: &ApiServer) -> Result<(), BoxError> {
    let (events, _) = server.list::<Event>(Some("default"))?;
    let mut reasons = BTreeMap::<String, i32>::new();
    for event in &events {
        let count = event.series.as_ref().map_or(1, |s| s.count);
        *reasons
            .entry(event.reason.clone().unwrap_or_default())
            .or_default() += count;
    }
    println!("Events on the Apps: {reasons:?}");
    // The injected failures may hit an Event instead of a child: a lost Event is not asked
    // for, but one never published at all is an error.
    let lost = LOST_EVENTS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    if !reasons.contains_key("CleanedUp") && !lost.iter().any(|r| r == "CleanedUp") {
        return Err("no Event says gamma's children were cleaned up".into());
    }
    Ok(())
}

/// Read-your-own-writes at work: every reconcile after one that wrote waited until the caches
/// showed those writes, so no replica ever found a child it had created missing from its
/// cache and created it again. Only a wait that timed out (a stale read, counted) could.
pub(crate) fn own_writes(tallies: &[Arc<Tally>]) -> Result<(), BoxError> {
    let sum = |count: fn(&Tally) -> u64| tallies.iter().map(|t| count(t)).sum::<u64>();
    let waits = sum(|t| t.waits.load(Ordering::Relaxed));
    let stale = sum(|t| t.stale.load(Ordering::Relaxed));
    let twice = sum(|t| t.created_twice.load(Ordering::Relaxed));
    let longest = tallies.iter().map(|t| *t.longest.lock()).max();
    println!(
        "{waits} reconciles waited for their key's previous writes to show (the longest {:?}), \
         {stale} ran on a stale read; children created twice: {twice}",
        longest.unwrap_or_default()
    );
    if twice > 0 && stale == 0 {
        return Err(format!(
            "{twice} children were created again by a replica whose cache did not show its own \
             creation, with no stale read counted"
        )
        .into());
    }
    Ok(())
}
