//! The decoders side by side (see `decode/common.rs`), with the system allocator.

use criterion::{Criterion, criterion_group, criterion_main};

#[path = "decode/common.rs"]
mod common;

fn decode(c: &mut Criterion) {
    common::decode(c, "system");
}

criterion_group!(benches, decode);
criterion_main!(benches);
