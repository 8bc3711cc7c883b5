//! W-SHARD: a sharded controller with 1, 2 and 4 replicas, each run in a fresh `w_shard`
//! process (its counting allocator measures each replica's informer heap).

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use super::child::{CHILD_LIMIT, output_within};
use super::figures::{Figure, Row, median, thousands};
use super::{Options, Rows};
use crate::w_shard;

/// The replica counts measured.
const REPLICAS: [usize; 3] = [1, 2, 4];

/// One `w_shard` run's figures, as it printed them.
#[derive(Debug, Clone, Default)]
struct Sample {
    reconciling: f64,
    rate: f64,
    max_heap: Option<f64>,
    cached_max: f64,
    server_filtered: bool,
}

fn sample(exe: &Path, objects: usize, replicas: usize) -> Result<Sample, String> {
    let out = output_within(
        Command::new(exe).args([
            "--objects",
            &objects.to_string(),
            "--replicas",
            &replicas.to_string(),
        ]),
        CHILD_LIMIT,
    )?;
    let text = String::from_utf8_lossy(&out);
    let line = text
        .lines()
        .rev()
        .find(|l| l.starts_with("w-shard "))
        .ok_or_else(|| format!("w_shard: no result in {text:?}"))?;
    let fields: HashMap<&str, &str> = line.split(' ').filter_map(|f| f.split_once('=')).collect();
    let number = |name: &str| -> Result<f64, String> {
        fields
            .get(name)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("w_shard: no {name} in {line:?}"))
    };
    let list_max = |name: &str| -> Option<f64> {
        fields
            .get(name)?
            .split(',')
            .map(|v| v.parse::<f64>().ok())
            .collect::<Option<Vec<_>>>()?
            .into_iter()
            .reduce(f64::max)
    };
    Ok(Sample {
        reconciling: number("reconciling_s")?,
        rate: number("rate")?,
        max_heap: list_max("heap"),
        cached_max: list_max("cached").unwrap_or(0.0),
        server_filtered: fields.get("server_filtered") == Some(&"true"),
    })
}

/// W-SHARD's rows: per replica count, the reconciles per second from every key queued to every
/// key reconciled, and the largest replica's informer heap, each against one replica's.
pub(super) fn shard_rows(opts: &Options, out: &mut Rows<'_>) {
    let objects = opts.sizes.shard_objects;
    let Some(exe) = &opts.w_shard_exe else {
        let row = Row::new(
            "W-SHARD",
            "not measured: no w_shard binary",
            Figure::NotApplicable,
            Figure::NotApplicable,
        );
        out.emit(row);
        return;
    };
    let mut single: Option<(f64, Option<f64>)> = None;
    for replicas in REPLICAS {
        let runs: Vec<Sample> = (0..opts.reps.max(1))
            .filter_map(|_| match sample(exe, objects, replicas) {
                Ok(s) => Some(s),
                Err(e) => {
                    eprintln!("W-SHARD, {replicas} replicas: {e}");
                    None
                }
            })
            .collect();
        if runs.is_empty() {
            continue;
        }
        let secs = median(runs.iter().map(|s| s.reconciling).collect());
        let rate = median(runs.iter().map(|s| s.rate).collect());
        let heap = runs
            .iter()
            .map(|s| s.max_heap)
            .collect::<Option<Vec<_>>>()
            .map(median);
        let cached = median(runs.iter().map(|s| s.cached_max).collect());
        let filtered = runs.iter().all(|s| s.server_filtered);
        let (one_rate, one_heap) = *single.get_or_insert((rate, heap));
        let mut row = Row::new(
            "W-SHARD",
            format!(
                "{replicas} replica(s), {} ConfigMaps, {} ms I/O per reconcile, concurrency {} \
                 each: every key queued to every key reconciled; {:.2}× one replica's rate",
                thousands(objects as f64),
                w_shard::RECONCILE_IO.as_millis(),
                w_shard::CONCURRENCY,
                rate / one_rate
            ),
            Figure::Secs(secs),
            Figure::NotApplicable,
        );
        if replicas > 1 {
            row = row.target("≥ 0.8·N× one replica's rate");
        }
        row.rate = Some(rate);
        out.emit(row);
        let row = Row::new(
            "W-SHARD",
            format!(
                "{replicas} replica(s): the largest replica's informer heap ({} objects cached, \
                 server-side selection: {}); {} of one replica's",
                thousands(cached),
                if filtered { "yes" } else { "no" },
                match (heap, one_heap) {
                    (Some(h), Some(one)) if one > 0.0 => format!("{:.2}×", h / one),
                    _ => "n/a".to_owned(),
                }
            ),
            heap.map_or(Figure::NotApplicable, Figure::Rss),
            Figure::NotApplicable,
        );
        out.emit(if replicas > 1 {
            row.target("≈ 1/N of one replica's")
        } else {
            row
        });
    }
}
