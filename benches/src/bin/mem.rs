//! One MEM measurement in a process of its own: `mem <mode> <pods>` prints one JSON line (see
//! `informer_benches::mem`). Modes: `ours-baseline`, `ours`, `kube-runtime-baseline`,
//! `kube-runtime`, `ours-metadata`, `ours-projection`, and over realistic pods `realistic-pod`,
//! `realistic-pod-stripped`, `realistic-metadata`, `realistic-metadata-stripped`,
//! `realistic-projection`, `realistic-projection-stripped`, `realistic-pod-skipped`,
//! `realistic-metadata-skipped`, `realistic-projection-skipped`, and the relist over HTTP
//! `relist-baseline`, `relist-paged`, `relist-whole`, `relist-kube-runtime-paged`,
//! `relist-kube-runtime-whole`, `relist-paged-unchanged`, `relist-kube-runtime-paged-unchanged`,
//! `relist-whole-unchanged`, `relist-kube-runtime-whole-unchanged`, `relist-paged-by-page`,
//! `relist-whole-by-page`.

use std::alloc::System;
use std::process::ExitCode;

use informer_benches::mem::{Heap, Mode, measure};
use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

fn heap() -> Option<Heap> {
    Some(Heap::of(GLOBAL.stats()))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(mode), Some(n)) = (
        args.first().and_then(|m| Mode::parse(m)),
        args.get(1).and_then(|n| n.parse::<usize>().ok()),
    ) else {
        let modes: Vec<&str> = Mode::ALL
            .iter()
            .chain(&[Mode::OursMetadata, Mode::OursProjection])
            .chain(&Mode::REALISTIC)
            .chain(&Mode::RELIST)
            .map(|m| m.name())
            .collect();
        eprintln!("usage: mem <{}> <pods>", modes.join("|"));
        return ExitCode::FAILURE;
    };
    if n == 0 {
        eprintln!("mem: <pods> must be at least 1");
        return ExitCode::FAILURE;
    }
    println!("{}", measure(mode, n, heap).to_json());
    ExitCode::SUCCESS
}
