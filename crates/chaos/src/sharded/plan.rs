//! What happens to the replicas of a sharded seed: how many start, and the kills, partitions
//! and joins between the scenario's steps, all drawn from the seed.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::scenario::Scenario;

/// Mixed into the seed so the replicas' draws are neither the scenario's nor the other plans'.
const REPLICA_SALT: u64 = 0x7368_6172_6465_6421;

/// The chance that a step is followed by something happening to a replica.
const CHURN_RATE: f64 = 0.035;

/// The most replicas running at once (joins wait while that many run).
pub const MAX_REPLICAS: usize = 5;

/// How a partitioned replica's requests are answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// `503 ServiceUnavailable` at once, and its watches dropped.
    Fail,
    /// No answer until it is healed (its watches deliver nothing meanwhile).
    Hang,
}

/// Something that happens to the replicas, after a step of the scenario.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplicaEvent {
    /// The replica with this number (among those started so far, modulo the running ones) is
    /// stopped abruptly: its future dropped, nothing released.
    Kill {
        /// Which running replica.
        pick: usize,
    },
    /// A running replica is cut off from the server for a while (the churn goes on).
    Partition {
        /// Which running replica.
        pick: usize,
        /// How its requests are answered.
        cut: Cut,
        /// How long until it is healed.
        hold: Duration,
    },
    /// A new replica starts.
    Join,
}

impl ReplicaEvent {
    /// A short name for the faults-by-kind table.
    pub fn kind(&self) -> &'static str {
        match self {
            ReplicaEvent::Kill { .. } => "replica-killed",
            ReplicaEvent::Partition { cut: Cut::Fail, .. } => "replica-cut-off-failing",
            ReplicaEvent::Partition { cut: Cut::Hang, .. } => "replica-cut-off-hanging",
            ReplicaEvent::Join => "replica-joined",
        }
    }
}

/// The replicas of a sharded seed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaPlan {
    /// Replicas started before the churn (3 to 5).
    pub initial: usize,
    /// How many shards the pods are split into.
    pub shards: u32,
    /// Events, each after the scenario's step at that index, in order.
    pub steps: Vec<(usize, ReplicaEvent)>,
}

impl ReplicaPlan {
    /// The replica plan of `scenario`'s seed. Every plan kills, cuts off or adds at least one
    /// replica; the running replicas never drop below one, nor rise above [`MAX_REPLICAS`].
    pub fn of(scenario: &Scenario) -> Self {
        let mut rng = StdRng::seed_from_u64(scenario.seed ^ REPLICA_SALT);
        let initial = rng.random_range(3..=MAX_REPLICAS);
        let shards = [4, 8, 16][rng.random_range(0..3)];
        let mut running = initial;
        let mut steps = Vec::new();
        let len = scenario.steps.len().max(1);
        // One event at a random step whatever the rate draws, so that no seed goes without.
        let forced = rng.random_range(0..len);
        for i in 0..len {
            if i != forced && !rng.random_bool(CHURN_RATE) {
                continue;
            }
            let event = match rng.random_range(0..3) {
                0 if running > 1 => {
                    running -= 1;
                    ReplicaEvent::Kill {
                        pick: rng.random_range(0..usize::MAX / 2),
                    }
                }
                1 => ReplicaEvent::Partition {
                    pick: rng.random_range(0..usize::MAX / 2),
                    cut: if rng.random_bool(0.5) {
                        Cut::Fail
                    } else {
                        Cut::Hang
                    },
                    hold: Duration::from_millis(rng.random_range(300..=3_000)),
                },
                _ if running < MAX_REPLICAS => {
                    running += 1;
                    ReplicaEvent::Join
                }
                _ => ReplicaEvent::Partition {
                    pick: rng.random_range(0..usize::MAX / 2),
                    cut: Cut::Fail,
                    hold: Duration::from_millis(rng.random_range(300..=3_000)),
                },
            };
            steps.push((i, event));
        }
        Self {
            initial,
            shards,
            steps,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_always_gives_the_same_plan() {
        let (a, b) = (Scenario::from_seed(3), Scenario::from_seed(4));
        assert_eq!(ReplicaPlan::of(&a), ReplicaPlan::of(&a));
        assert_ne!(ReplicaPlan::of(&a), ReplicaPlan::of(&b));
    }

    #[test]
    fn plans_keep_between_one_and_five_replicas_and_hold_every_kind_of_event() {
        let mut kinds = std::collections::BTreeSet::new();
        for seed in 0..200 {
            let scenario = Scenario::with_steps(seed, 120);
            let plan = ReplicaPlan::of(&scenario);
            assert!((3..=MAX_REPLICAS).contains(&plan.initial));
            assert!(!plan.steps.is_empty(), "seed {seed}: nothing happens");
            let mut running = plan.initial;
            let mut last = 0;
            for (at, event) in &plan.steps {
                assert!(*at >= last && *at < scenario.steps.len());
                last = *at;
                match event {
                    ReplicaEvent::Kill { .. } => running -= 1,
                    ReplicaEvent::Join => running += 1,
                    ReplicaEvent::Partition { .. } => {}
                }
                assert!((1..=MAX_REPLICAS).contains(&running), "seed {seed}");
                kinds.insert(event.kind());
            }
        }
        assert_eq!(kinds.len(), 4, "{kinds:?}");
    }
}
