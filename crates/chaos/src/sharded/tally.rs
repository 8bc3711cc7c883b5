//! The sharded runs' figures over many seeds, as a [`SeedSuite`].

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use informer_kube::EncodingCounts;

use super::{ShardedOutcome, run_sharded_seed};
use crate::runner::{Failure, Suite};
use crate::scenario::Scenario;
use crate::seeds::{SeedSuite, Summary, run_suite};

/// The sharded runs' figures over many seeds (see [`Summary`]).
#[derive(Debug, Default)]
pub struct ShardedTally {
    /// Replicas started, joins included.
    pub replicas: usize,
    /// Reconciles checked for overlaps.
    pub reconciles: u64,
    /// Shard terms started.
    pub terms_started: u64,
    /// Terms handed over.
    pub handed_off: u64,
    /// Terms lost at the renew deadline.
    pub lost: u64,
    /// Pods checked at their final version.
    pub final_live: usize,
    /// Deletions seen by the last reconcile.
    pub final_deleted: usize,
    /// Deletions no reconcile saw.
    pub unseen_deletions: usize,
    /// The slowest convergence.
    pub slowest_settle: Duration,
    /// Its seed.
    pub slowest_seed: u64,
}

impl SeedSuite for ShardedTally {
    type Outcome = ShardedOutcome;

    const SUITE: Suite = Suite::Sharded;

    const RUN_SEED: fn(&Scenario) -> Result<ShardedOutcome, Failure> = run_sharded_seed;

    fn add(&mut self, o: ShardedOutcome) -> (BTreeMap<&'static str, u64>, EncodingCounts) {
        self.replicas += o.replicas;
        self.reconciles += o.reconciles;
        self.terms_started += o.terms_started;
        self.handed_off += o.handed_off;
        self.lost += o.lost;
        self.final_live += o.final_live;
        self.final_deleted += o.final_deleted;
        self.unseen_deletions += o.unseen_deletions;
        if o.settled_in >= self.slowest_settle {
            self.slowest_settle = o.settled_in;
            self.slowest_seed = o.seed;
        }
        (o.faults, EncodingCounts::default())
    }

    fn write_lines(&self, _passed: usize, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "replicas: {}, reconciles checked: {} (overlaps: 0), shard terms started: {} \
             (handed off: {}, lost: {})",
            self.replicas, self.reconciles, self.terms_started, self.handed_off, self.lost
        )?;
        writeln!(
            f,
            "pods at their final version: {}, deletions seen: {} (unseen, nothing left: {})",
            self.final_live, self.final_deleted, self.unseen_deletions
        )?;
        writeln!(
            f,
            "slowest settle: {:.2?} (seed {})",
            self.slowest_settle, self.slowest_seed
        )
    }
}

/// Runs the sharded scenarios of `scenarios` on `jobs` threads, each on a runtime of its own.
pub fn run_sharded_seeds(
    scenarios: Vec<Scenario>,
    jobs: usize,
    progress: impl Fn(&Result<ShardedOutcome, Failure>) + Sync,
) -> Summary<ShardedTally> {
    run_suite(scenarios, jobs, progress)
}
