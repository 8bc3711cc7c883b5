//! The chaos convergence suite: seeded scenarios against the whole stack, each checked for
//! convergence, a consistent notification history, justified relists and a clean shutdown.
//! Several seeds run at once, each on a runtime of its own; once all have finished, no
//! informer thread may be left. A failure prints its seed and the command that replays it.

use informer_chaos::{Scenario, run_seeds};

/// Seeds run by CI; `CHAOS_SEEDS` overrides the count, `CHAOS_FIRST_SEED` the start.
const SEEDS: u64 = 50;

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok()?.parse().ok()
}

#[test]
fn seeded_scenarios_converge_under_faults() {
    let first = env_u64("CHAOS_FIRST_SEED").unwrap_or(0);
    let count = env_u64("CHAOS_SEEDS").unwrap_or(SEEDS);
    let scenarios: Vec<Scenario> = (first..first + count).map(Scenario::from_seed).collect();
    let summary = run_seeds(scenarios, 4, |result| {
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
    if let Some(threads) = summary.threads_left {
        let pool = informer::DeliveryPool::global();
        assert_eq!(
            threads,
            pool.size() + 1,
            "the delivery pool's threads and its monitor, not one per informer or handler"
        );
    }
    assert!(
        summary.seeds_coalescing > 0,
        "the slow consumers fell behind and coalesced in some seeds (the check covers it)"
    );
    assert!(summary.faults.values().sum::<u64>() > count, "faults fired");
    assert!(summary.relists > 0, "some faults forced relists");
}
