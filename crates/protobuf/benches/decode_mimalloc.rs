//! The decoders side by side (see `decode/common.rs`), with mimalloc as the global allocator:
//! a decoded object is hundreds of small blocks (a realistic pod without its managed fields,
//! about 260; with them, about 640), so the allocator is a third of the decode time, and a
//! binary's choice of allocator moves the figures.

use criterion::{Criterion, criterion_group, criterion_main};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[path = "decode/common.rs"]
mod common;

fn decode(c: &mut Criterion) {
    common::decode(c, "mimalloc");
}

criterion_group!(benches, decode);
criterion_main!(benches);
