//! `--shards N`: N replicas share the Apps by shard, each caching and reconciling its own; one
//! crashes mid-run, and its shards move to the others.

use std::collections::BTreeSet;
use std::time::Duration;

use informers::apiserver::{ApiServer, ResourceInfo};
use informers::informer::{ShardField, ShardSelector};
use informers::leaderelection::desired_owner;

use crate::check::{own_writes, wait_apps_converged};
use crate::replica::{Mode, Replica};
use crate::{BoxError, app, scale};

/// The shards the Apps' hash space is split into.
const SHARDS: u32 = 8;
/// The Apps of the sharded run.
const APPS: usize = 24;

/// The sharded run: the Apps created, the replicas started, the shards checked, one replica
/// crashed, the world converged again.
pub(crate) async fn run(server: ApiServer, apps: &ResourceInfo, n: usize) -> Result<(), BoxError> {
    let names: Vec<String> = (0..APPS).map(|i| format!("app-{i:02}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    for (i, name) in names.iter().enumerate() {
        server.create_value(apps, app(name, 1 + (i % 3) as u32))?;
    }
    let mut running = Vec::new();
    for i in 0..n {
        let name = format!("controller-{i}");
        running.push(Replica::on_simulator(
            &server,
            &name,
            Mode::Sharded(SHARDS),
        )?);
    }
    let tallies: Vec<_> = running.iter().map(|r| r.tally.clone()).collect();
    wait_apps_converged(&server, apps, &names, "sharded, initial").await?;
    wait_settled(&server, apps, &names, &running).await?;
    println!("converged: {APPS} Apps over {SHARDS} shards and {n} replica(s)");
    print_shards(&running);

    if running.len() > 1 {
        // A crash mid-run, while Apps change: its shards' Leases lapse and move.
        scale(&server, apps, names[0], 4)?;
        let crashed = running.remove(0);
        let (name, had) = (crashed.name.clone(), owned(&crashed));
        crashed.crash().await?;
        for (i, name) in names.iter().enumerate().skip(1).step_by(5) {
            scale(&server, apps, name, 1 + (i % 2) as u32)?;
        }
        wait_apps_converged(&server, apps, &names, "after a replica crashed").await?;
        wait_settled(&server, apps, &names, &running).await?;
        println!("{name} crashed: its shards {had:?} moved to the others; converged again");
        print_shards(&running);
    }
    own_writes(&tallies)?;
    for replica in running {
        replica.stop().await?;
    }
    server.shutdown().await;
    Ok(())
}

fn owned(replica: &Replica) -> BTreeSet<u32> {
    replica
        .shards
        .as_ref()
        .map(|r| r.status().owned)
        .unwrap_or_default()
}

/// Waits (up to 30 s) until the replicas own every shard between them, each its own, and
/// each caches exactly the Apps of its shards.
async fn wait_settled(
    server: &ApiServer,
    apps: &ResourceInfo,
    names: &[&str],
    running: &[Replica],
) -> Result<(), BoxError> {
    let settled = || -> Result<bool, BoxError> {
        let mut uids = Vec::new();
        for name in names {
            let app = server.get_value(apps, Some("default"), name)?;
            let uid = app["metadata"]["uid"].as_str().unwrap_or_default();
            uids.push((format!("default/{name}"), uid.to_owned()));
        }
        let mut shards = BTreeSet::new();
        for replica in running {
            let mine = owned(replica);
            // Settled: every replica sees all of them, and owns what rendezvous hashing gives it.
            let status = replica
                .shards
                .as_ref()
                .map(|r| r.status())
                .unwrap_or_default();
            let members = status.members.iter().map(String::as_str);
            let desired: BTreeSet<u32> = (0..SHARDS)
                .filter(|s| desired_owner(members.clone(), *s) == Some(replica.name.as_str()))
                .collect();
            if status.members.len() != running.len()
                || mine != desired
                || mine.iter().any(|s| shards.contains(s))
            {
                return Ok(false);
            }
            shards.extend(mine.iter().copied());
            let selector = ShardSelector::for_shards(ShardField::Uid, SHARDS, mine)
                .unwrap_or_else(|_| ShardSelector::none(ShardField::Uid));
            let want: BTreeSet<&str> = uids
                .iter()
                .filter(|(_, uid)| selector.matches(uid))
                .map(|(key, _)| key.as_str())
                .collect();
            let keys = replica.apps.lister().keys();
            let have: BTreeSet<&str> = keys.iter().map(String::as_str).collect();
            if have != want {
                return Ok(false);
            }
        }
        Ok(shards.len() == SHARDS as usize)
    };
    tokio::time::timeout(Duration::from_secs(30), async {
        while !settled().unwrap_or(false) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .map_err(|_| "the replicas did not settle on the shards, each caching its own".into())
}

/// Each replica's shards and caches.
fn print_shards(running: &[Replica]) {
    for replica in running {
        let stats = replica
            .shards
            .as_ref()
            .map(|r| r.stats())
            .unwrap_or_default();
        println!(
            "  {}: shards {:?} (terms started {}, handed off {}, lost {}), {} Apps cached",
            replica.name,
            owned(replica),
            stats.started,
            stats.handed_off,
            stats.lost,
            replica.apps.lister().keys().len(),
        );
    }
}
