//! A sharded controller's metrics, per shard, read from the controller's own counters at each
//! scrape (`Controller::shard_stats`).

use informer_runtime::{ControllerShardStats, ShardCounts, ShardStatsHandle};
use parking_lot::Mutex;
use prometheus_client::encoding::DescriptorEncoder;

use crate::Labels;
use crate::encode::family;

/// The sharded controllers watched, each by its name.
#[derive(Default)]
pub(crate) struct Sources(Mutex<Vec<(String, ShardStatsHandle)>>);

impl Sources {
    pub(crate) fn add(&self, controller: &str, handle: ShardStatsHandle) {
        self.0.lock().push((controller.to_owned(), handle));
    }
}

/// Encodes the sharded controllers' counters at each scrape.
pub(crate) struct Collector {
    pub(crate) sources: std::sync::Arc<Sources>,
}

impl std::fmt::Debug for Collector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Collector").finish_non_exhaustive()
    }
}

/// One sample per shard: name, help, counter (or gauge), value.
type Column = (&'static str, &'static str, bool, fn(&ShardCounts) -> f64);

const SHARD_COLUMNS: [Column; 6] = [
    (
        "controller_shard_owned",
        "Whether this replica owns the shard now (1) or not (0)",
        false,
        |s| f64::from(u8::from(s.owned)),
    ),
    (
        "controller_shard_begun",
        "Whether the shard's term has begun here (1): every cache holds the shard and its keys are reconciled; 0 while owned and waiting for the relists, or not owned",
        false,
        |s| f64::from(u8::from(s.begun)),
    ),
    (
        "controller_shard_terms",
        "Terms of the shard started on this replica (moves in)",
        true,
        |s| s.terms as f64,
    ),
    (
        "controller_shard_keys_queued_at_start",
        "Keys of the shard queued as its terms began (cached keys and remembered deletions)",
        true,
        |s| s.queued_at_start as f64,
    ),
    (
        "controller_shard_reconciles",
        "Reconciles of the shard's keys started on this replica, under a term of the shard",
        true,
        |s| s.reconciles as f64,
    ),
    (
        "controller_shard_keys_skipped",
        "Keys of the shard dequeued while this replica did not own it: not reconciled here",
        true,
        |s| s.skipped as f64,
    ),
];

impl prometheus_client::collector::Collector for Collector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let controllers: Vec<(Labels, ControllerShardStats)> = self
            .sources
            .0
            .lock()
            .iter()
            .map(|(name, handle)| (vec![("controller", name.clone())], handle.stats()))
            .collect();
        for (name, help, counter, value) in SHARD_COLUMNS {
            let values: Vec<(Labels, f64)> = controllers
                .iter()
                .flat_map(|(labels, stats)| {
                    stats.shards.iter().map(move |s| {
                        let mut l = labels.clone();
                        l.push(("shard", s.shard.to_string()));
                        (l, value(s))
                    })
                })
                .collect();
            family(&mut encoder, name, help, counter, &values)?;
        }
        let moves: Vec<(Labels, f64)> = controllers
            .iter()
            .flat_map(|(labels, stats)| {
                let a = stats.assignment;
                [
                    ("started", a.started),
                    ("handed_off", a.handed_off),
                    ("lost", a.lost),
                ]
                .map(|(kind, n)| {
                    let mut l = labels.clone();
                    l.push(("move", kind.to_owned()));
                    (l, n as f64)
                })
            })
            .collect();
        family(
            &mut encoder,
            "controller_shard_moves",
            "Shard terms of this replica by how they moved: started (in), handed_off (out, \
             gracefully), lost (out, at the renew deadline or the Lease found taken)",
            true,
            &moves,
        )?;
        let unplaced: Vec<(Labels, f64)> = controllers
            .iter()
            .map(|(labels, stats)| (labels.clone(), stats.unplaced as f64))
            .collect();
        family(
            &mut encoder,
            "controller_shard_keys_unplaced",
            "Keys dequeued whose object was neither cached nor a remembered deletion: no shard \
             known, not reconciled",
            true,
            &unplaced,
        )
    }
}
