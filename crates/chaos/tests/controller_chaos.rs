//! The controller chaos suite: a reconciler keeping one child ConfigMap per pod, run through
//! seeded churn, the informers' faults and disturbances of its own (drifted, deleted, orphan and
//! second children, failed writes, latency; half the seeds behind a leader election whose leader
//! is deposed while orphans are created). Each seed must converge on the server within the
//! settle bound, never run two reconciles of one key at once nor one before the caches synced,
//! and stop cleanly. A failure prints its seed and the command that replays it.

use informer_chaos::{Scenario, run_controller_seeds};

/// Seeds run by CI; `CHAOS_CONTROLLER_SEEDS` overrides the count, `CHAOS_FIRST_SEED` the start.
const SEEDS: u64 = 40;

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok()?.parse().ok()
}

#[test]
fn a_controller_converges_under_faults() {
    let first = env_u64("CHAOS_FIRST_SEED").unwrap_or(0);
    let count = env_u64("CHAOS_CONTROLLER_SEEDS").unwrap_or(SEEDS);
    let scenarios: Vec<Scenario> = (first..first + count).map(Scenario::from_seed).collect();
    let summary = run_controller_seeds(scenarios, 4, |result| {
        if let Err(failure) = result {
            eprintln!("{failure}");
        }
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
    assert!(summary.reconciles > count, "reconciles ran");
    assert!(
        summary.creates > 0 && summary.replaces > 0 && summary.deletes > 0,
        "every kind of write"
    );
    assert!(
        summary.errors_retried > 0,
        "some writes failed and were retried"
    );
    for kind in [
        "child-drift-data",
        "child-deleted",
        "orphan-created",
        "extra-child-created",
        "leader-deposed",
    ] {
        assert!(
            summary.faults.contains_key(kind),
            "{kind} fired: {:?}",
            summary.faults
        );
    }
}
