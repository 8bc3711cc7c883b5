//! Where the heap bytes of the realistic pod go: each part decoded on its own, its live heap
//! counted by this binary's global allocator (`informer_benches::anatomy`). Prints markdown.

use std::alloc::System;

use informer_benches::anatomy::{PARTITION, anatomy, fixture, part_name, split};
use informer_benches::anatomy::{string_payload, type_sizes};
use informer_benches::mem::Heap;
use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

fn heap() -> Option<Heap> {
    Some(Heap::of(GLOBAL.stats()))
}

fn main() {
    let rows = anatomy(heap);
    let pct = |bytes: usize| 100.0 * bytes as f64 / rows[0].heap_bytes.max(1) as f64;
    let partition: Vec<String> = PARTITION.iter().map(|(p, _)| part_name(p)).collect();
    let (mut bytes, mut blocks) = (0, 0);
    println!("| part | count | heap bytes | of `Pod` | blocks | size_of inline |");
    println!("|---|---:|---:|---:|---:|---:|");
    for r in &rows {
        let mark = if partition.contains(&r.part) {
            " ∗"
        } else {
            ""
        };
        if !mark.is_empty() {
            (bytes, blocks) = (bytes + r.heap_bytes, blocks + r.heap_blocks);
        }
        let (part, n, b, pc) = (&r.part, r.count, r.heap_bytes, pct(r.heap_bytes));
        let (k, inline) = (r.heap_blocks, r.inline_bytes);
        println!("| {part}{mark} | {n} | {b} | {pc:.1} % | {k} | {inline} |");
    }
    println!(
        "| **sum of the ∗ parts** | | **{bytes}** | {:.1} % | **{blocks}** | |",
        pct(bytes)
    );

    let pod = fixture();
    let parts = split(&pod);
    let all = string_payload(&pod, "");
    let managed = string_payload(&parts[0], "managedFields");
    let trees = parts[0].as_array().into_iter().flatten();
    let keys = trees.map(|m| string_payload(&m["fieldsV1"], "fieldsV1"));
    let keys = keys.fold((0, 0), |(b, n), (tb, tn)| (b + tb, n + tn));
    println!("\n| string payload of | bytes | non-empty strings |\n|---|---:|---:|");
    for (what, (b, n)) in [
        ("the whole pod", all),
        (
            "the pod without managedFields",
            (all.0 - managed.0, all.1 - managed.1),
        ),
        ("managedFields", managed),
        ("↳ the keys of the fieldsV1 trees", keys),
    ] {
        println!("| {what} | {b} | {n} |");
    }
    println!("\n| type | size_of |\n|---|---:|");
    for (name, size) in type_sizes() {
        println!("| `{name}` | {size} |");
    }
}
