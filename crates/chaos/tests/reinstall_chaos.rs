//! Custom resources that come and go under chaos: seeded runs in which a CRD is deleted and
//! installed again between writes of its objects and the informers' faults, each checked for
//! convergence of a factory informer (and a handler's view) to the server once it is served
//! again. A failure names its seed.

use informer_chaos::{ReinstallPlan, reinstall_replay_command, run_reinstall};

/// Seeds run by CI (short runs); `CHAOS_REINSTALL_SEEDS` overrides the count.
const SEEDS: u64 = 8;
/// Steps of each run.
const STEPS: usize = 150;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn informers_converge_while_their_crd_is_deleted_and_installed_again() {
    let count = std::env::var("CHAOS_REINSTALL_SEEDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(SEEDS);
    let mut failures = Vec::new();
    let (mut uninstalls, mut not_served) = (0, 0);
    for seed in 0..count {
        uninstalls += ReinstallPlan::with_steps(seed, STEPS).uninstalls();
        match run_reinstall(seed, STEPS).await {
            Ok(outcome) => {
                println!("{outcome}");
                not_served += outcome.not_served_steps;
            }
            Err(problems) => {
                failures.extend(problems);
                failures.push(format!("replay: {}", reinstall_replay_command(seed, STEPS)));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
    assert!(
        uninstalls >= count as usize,
        "the CRD was deleted in the runs: {uninstalls}"
    );
    assert!(
        not_served > 0,
        "the informers found their resource not served at times"
    );
}

#[test]
fn a_plan_is_the_same_for_a_seed_and_every_write_is_valid_where_it_stands() {
    use informer_chaos::AppStep;
    use std::collections::BTreeSet;
    for seed in 0..50 {
        let plan = ReinstallPlan::with_steps(seed, STEPS);
        assert_eq!(plan, ReinstallPlan::with_steps(seed, STEPS));
        let (mut live, mut installed) = (BTreeSet::new(), true);
        for step in &plan.steps {
            match step {
                AppStep::Create { name, .. } => assert!(installed && live.insert(*name)),
                AppStep::Update { name, .. } => assert!(installed && live.contains(name)),
                AppStep::Delete { name } => assert!(installed && live.remove(name)),
                AppStep::Uninstall => {
                    assert!(installed);
                    (installed, live) = (false, BTreeSet::new());
                }
                AppStep::Install => {
                    assert!(!installed);
                    installed = true;
                }
                AppStep::Fault(_) | AppStep::Pause(_) => {}
            }
        }
        assert!(
            installed,
            "seed {seed}: the plan ends with the CRD installed"
        );
    }
}
