//! LEAN: the read costs of the compact cache against the default cache.

use super::figures::{Figure, Row, median_of};
use super::mem::realistic_pods;
use super::{Options, Rows};

/// LEAN: the read costs of the compact cache against the default cache, side by side (the
/// default cache in the kube-runtime column).
pub(super) fn lean_rows(opts: &Options, out: &mut Rows<'_>) {
    use crate::lean::{IN_NAMESPACE, by_index, caches, get_each, get_same};
    use informer_store::KnownObjects;
    let n = realistic_pods(&opts.sizes).min(10_000);
    let (plain, compact) = caches(n, crate::mem::COMPACT_HOT);
    let keys = plain.list_keys();
    let runs = opts.reps.max(3);
    let cold = |c: &dyn informer_store::Indexer<_>| median_of(runs, || get_each(c, &keys));
    let hot = |c: &dyn informer_store::Indexer<_>| median_of(runs, || get_same(c, &keys[0], 1_000));
    let index = |c: &dyn informer_store::Indexer<_>| median_of(runs, || by_index(c));
    for (what, ours, default) in [
        (
            format!("get of a pod not kept decoded ({n} realistic pods, every key once)"),
            cold(&*compact),
            cold(&plain),
        ),
        (
            "get of a pod kept decoded (the same key again)".to_owned(),
            hot(&*compact),
            hot(&plain),
        ),
        (
            format!("by_index of {IN_NAMESPACE} pods (one namespace)"),
            index(&*compact),
            index(&plain),
        ),
    ] {
        out.emit(Row::new(
            "LEAN",
            format!("{what}: compact cache (ours) vs the default cache"),
            Figure::per_op(ours),
            Figure::per_op(default),
        ));
    }
}
