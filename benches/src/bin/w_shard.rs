//! W-SHARD in a process of its own, with a counting allocator: `w_shard --objects N
//! --replicas R` runs one measurement and prints its figures on one line (the report reads it).

use std::alloc::System;

use clap::Parser;
use informer_benches::mem::Heap;
use informer_benches::w_shard;
use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

fn live_heap() -> Option<usize> {
    Some(Heap::of(GLOBAL.stats()).bytes)
}

/// One W-SHARD measurement.
#[derive(Debug, Parser)]
#[command(name = "w_shard")]
struct Args {
    /// ConfigMaps in the simulator.
    #[arg(long, default_value_t = 100_000)]
    objects: usize,
    /// Replicas of the sharded controller.
    #[arg(long, default_value_t = 1)]
    replicas: usize,
}

fn main() {
    let args = Args::parse();
    let run = w_shard::run(args.objects, args.replicas, live_heap);
    let heaps: Vec<String> = run
        .heap
        .iter()
        .map(|h| h.map_or("-".to_owned(), |h| h.to_string()))
        .collect();
    let cached: Vec<String> = run.cached.iter().map(ToString::to_string).collect();
    println!(
        "w-shard replicas={} objects={} ready_s={:.3} reconciling_s={:.4} rate={:.0} \
         cached={} heap={} server_filtered={}",
        run.replicas,
        run.objects,
        run.ready.as_secs_f64(),
        run.reconciling.as_secs_f64(),
        run.rate(),
        cached.join(","),
        heaps.join(","),
        run.server_filtered
    );
}
