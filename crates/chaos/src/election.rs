//! The controller scenario behind a leader election: about half the seeds run their controller
//! on a Lease, and some of those depose it for a while: the Lease is taken by another holder,
//! the controller steps down and stands by, an orphan child is created while no replica leads,
//! and the Lease is given back. The next term must see the whole world (the orphan's initial
//! add was dropped while standing by) and the world must converge as without an election.

use std::time::{Duration, Instant};

use informer_apiserver::ApiServer;
use informer_leaderelection::{ElectionConfig, KubeLease, LeaderElector};
use k8s_openapi::api::coordination::v1::Lease;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

use crate::controller::Disturbance;
use crate::scenario::{NAMES_PER_NAMESPACE, NAMESPACES, Scenario};

/// The namespace and name of the controller's Lease.
const LEASE: (&str, &str) = ("default", "chaos-controller");

/// The controller's identity on the Lease.
const IDENTITY: &str = "chaos-controller";

/// Who takes the Lease away.
const USURPER: &str = "chaos-usurper";

/// Mixed into the seed so the election's draws are neither the scenario's nor the plan's.
const ELECTION_SALT: u64 = 0x6c65_6164_6572;

/// How long a deposed leader may take to step down: its renew deadline and a retry, with room
/// for a loaded machine.
const STEP_DOWN_BOUND: Duration = Duration::from_secs(20);

/// The chance that a step of an elected seed begins a deposition.
const DEPOSE_RATE: f64 = 0.03;

/// Whether a seed's controller runs behind a leader election, and when it is deposed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElectionPlan {
    /// The controller runs on a Lease.
    pub elected: bool,
    /// Depositions and restorations, each after the scenario's step at that index.
    pub steps: Vec<(usize, Disturbance)>,
}

impl ElectionPlan {
    /// The election plan of `scenario`'s seed: half the seeds are elected; a deposition lasts
    /// 5 to 40 steps (or until the calm at the end).
    pub fn of(scenario: &Scenario) -> Self {
        let mut rng = StdRng::seed_from_u64(scenario.seed ^ ELECTION_SALT);
        let elected = rng.random_bool(0.5);
        let mut steps = Vec::new();
        if !elected {
            return Self { elected, steps };
        }
        let mut restore_at: Option<usize> = None;
        for i in 0..scenario.steps.len() {
            if restore_at == Some(i) {
                restore_at = None;
                steps.push((i, Disturbance::Restored));
            } else if restore_at.is_none() && rng.random_bool(DEPOSE_RATE) {
                restore_at = Some(i + rng.random_range(5..40));
                steps.push((
                    i,
                    Disturbance::Deposed {
                        namespace: rng.random_range(0..NAMESPACES.len()),
                        name: rng.random_range(0..NAMES_PER_NAMESPACE),
                    },
                ));
            }
        }
        Self { elected, steps }
    }
}

/// The elector of the controller, on the Lease in the simulator: short timings, so a
/// deposition and a new term take a second or two.
pub fn elector(client: &kube::Client) -> Result<LeaderElector, String> {
    let lease = KubeLease::new(client.clone(), LEASE.0, LEASE.1);
    let config = ElectionConfig::new(IDENTITY).timings(
        Duration::from_millis(1500),
        Duration::from_millis(1000),
        Duration::from_millis(150),
    );
    LeaderElector::new(lease, config).map_err(|e| format!("the elector's configuration: {e}"))
}

/// Takes the Lease away from the controller (another holder, renewing for an hour) and waits
/// until it has stepped down. `Ok(false)` if the Lease does not exist yet (the controller has
/// not led).
pub async fn depose(server: &ApiServer, elector: &LeaderElector) -> Result<bool, String> {
    let taken = json!({"spec": {
        "holderIdentity": USURPER,
        "leaseDurationSeconds": 3600,
        "leaseTransitions": 1_000_000,
    }});
    if server
        .patch::<Lease>(Some(LEASE.0), LEASE.1, &taken)
        .is_err()
    {
        return Ok(false);
    }
    let begun = Instant::now();
    while elector.is_leader() {
        if begun.elapsed() > STEP_DOWN_BOUND {
            return Err(format!(
                "the deposed leader did not step down within {STEP_DOWN_BOUND:?}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(true)
}

/// Gives the Lease back: it is deleted, so the controller acquires it at its next try.
pub fn restore(server: &ApiServer) -> bool {
    server.delete::<Lease>(Some(LEASE.0), LEASE.1).is_ok()
}

/// Whether the Lease is held by the usurper now (a deposition the calm must end).
pub fn usurped(server: &ApiServer) -> bool {
    server
        .get::<Lease>(Some(LEASE.0), LEASE.1)
        .is_ok_and(|lease| {
            lease
                .spec
                .and_then(|s| s.holder_identity)
                .is_some_and(|h| h == USURPER)
        })
}
