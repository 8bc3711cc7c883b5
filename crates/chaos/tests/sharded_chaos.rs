//! The sharded controller chaos suite: the chaos controller as 3 to 5 replicas splitting the
//! pods into shards held through Leases, through seeded churn and faults while replicas are
//! killed, cut off from the server and joined by new ones. Each seed must converge (every
//! shard owned once, each cache exactly its shards, the world as the pods want it, every pod
//! last reconciled at its final version), and its ledger of reconciles must show no two
//! replicas reconciling one object at overlapping times. A failure prints its seed and the
//! command that replays it.

use std::path::Path;

use informer_chaos::Scenario;
use informer_chaos::sharded::process::run_sharded_processes;
use informer_chaos::sharded::run_sharded_seeds;

/// Seeds run by CI; `CHAOS_SHARDED_SEEDS` overrides the count, `CHAOS_FIRST_SEED` the start.
const SEEDS: u64 = 6;

/// Steps per seed: long enough for kills and cuts to move shards mid-churn.
const STEPS: usize = 150;

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok()?.parse().ok()
}

#[test]
fn sharded_replicas_never_overlap_and_converge_through_kills_cuts_and_joins() {
    let first = env_u64("CHAOS_FIRST_SEED").unwrap_or(0);
    let count = env_u64("CHAOS_SHARDED_SEEDS").unwrap_or(SEEDS);
    let scenarios: Vec<Scenario> = (first..first + count)
        .map(|seed| Scenario::with_steps(seed, STEPS))
        .collect();
    let summary = run_sharded_seeds(scenarios, 2, |result| match result {
        Ok(outcome) => println!("{outcome}"),
        Err(failure) => eprintln!("{failure}"),
    });
    println!("{summary}");
    assert!(
        summary.failures.is_empty(),
        "{} of {} seeds failed: {:?} (see above for each seed's problems and replay command)",
        summary.failures.len(),
        summary.seeds,
        summary.failures.iter().map(|f| f.seed).collect::<Vec<_>>()
    );
    assert_eq!(summary.jobs_left, 0, "pop loops or handlers left running");
    assert!(
        summary.reconciles > count * 10,
        "reconciles ran and were checked"
    );
    assert!(
        summary.final_live > 0,
        "pods checked at their final version"
    );
    assert!(
        summary.terms_started > summary.replicas as u64,
        "shards moved between replicas"
    );
    for kind in ["replica-killed", "replica-joined"] {
        assert!(
            summary.faults.contains_key(kind),
            "{kind}: {:?}",
            summary.faults
        );
    }
    assert!(
        summary
            .faults
            .keys()
            .any(|k| k.starts_with("replica-cut-off")),
        "a replica was cut off: {:?}",
        summary.faults
    );
}

/// One short seed with every replica a process of its own (the `informer-chaos` binary),
/// killed with `SIGKILL`: the same checks across address spaces.
#[test]
fn sharded_replicas_in_processes_of_their_own() {
    let exe = Path::new(env!("CARGO_BIN_EXE_informer-chaos"));
    let seed = env_u64("CHAOS_FIRST_SEED").unwrap_or(6);
    let scenario = Scenario::with_steps(seed, 150);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    match runtime.block_on(run_sharded_processes(&scenario, exe)) {
        Ok(outcome) => {
            println!("{outcome}");
            assert!(outcome.reconciles > 10, "reconciles ran and were checked");
            assert!(
                outcome.final_live > 0,
                "pods checked at their final version"
            );
        }
        Err(failure) => panic!("{failure} --processes"),
    }
}
