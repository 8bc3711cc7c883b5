//! W-HTTP: W-INF through kube-client against the in-process API server on loopback — 50,000
//! pods listed, then 100,000 MODIFIED events replayed to the watch — for our informer (4
//! handlers) and for kube-runtime's watcher and reflector (4 subscribers).
//!
//! `informer_benches::w_http` says how the events are written (between the list and the watch,
//! behind a gate in the client, not timed) and what each side does. The figure is the list time
//! (start → every handler has every listed pod) plus the watch time (the gate opens → every
//! handler has every event); the report binary prints the two apart. Each side runs twice: on
//! the simulator, and on pre-encoded responses served from memory (`w_http::Backend::Replay`,
//! the client's cost alone).

use criterion::{Criterion, criterion_group, criterion_main};
use informer_benches::Sizes;
use std::sync::Arc;

use informer_benches::realistic::ManagedFields;
use informer_benches::replay::Encoded;
use informer_benches::w_http::{self, Backend, Run};
use informer_benches::w_inf::{self, Data};

type Side = fn(&tokio::runtime::Runtime, &Data, usize, Backend<'_>) -> Run;

fn w_http(c: &mut Criterion) {
    let rt = w_inf::runtime();
    let sizes = Sizes::full();
    let data = Data::new(sizes.listed, sizes.events);
    let encoded = Arc::new(Encoded::new(&data));
    let mut g = c.benchmark_group("w_http");
    g.sample_size(10);
    let sides: [(&str, Side); 2] = [
        ("ours", |rt, data, n, backend| {
            w_http::ours(rt, data, n, backend, ManagedFields::Kept)
        }),
        ("kube-runtime", |rt, data, n, backend| {
            w_http::kube_runtime(rt, data, n, backend, false)
        }),
    ];
    for (backend, name) in [
        (Backend::Simulator, "simulator"),
        (Backend::Replay(&encoded), "client-only"),
    ] {
        for (side, run) in sides {
            g.bench_function(format!("{name}/{side}"), |b| {
                b.iter_custom(|iters| {
                    (0..iters)
                        .map(|_| run(&rt, &data, 4, backend).total())
                        .sum()
                })
            });
        }
    }
    g.finish();
}

criterion_group!(benches, w_http);
criterion_main!(benches);
