//! One side of W-HTTP client only, a few times over, in a process of its own (for a profiler,
//! and for the report's rows of each side in its own process):
//! `w_http_client [ours|ours-protobuf|ours-without-managed-fields|kube-runtime] [runs]
//! [synthetic|realistic] [listed events]`. Prints each run's list and watch times, and a line
//! `run <list s> <watch s>` per run for the report; `realistic`: on realistic pods, at a tenth of
//! the sizes; `ours-protobuf`: the server answers protobuf, as it does to the adapter's default
//! request (every other side reads JSON).

use std::sync::Arc;

use informer_benches::realistic::ManagedFields;
use informer_benches::replay::Encoded;
use informer_benches::w_http::{self, Backend};
use informer_benches::{Sizes, w_inf};

// With the `mimalloc` feature, as the `report` that runs this binary.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let mut args = std::env::args().skip(1);
    let side = args.next().unwrap_or_else(|| "ours".into());
    let runs: usize = args.next().and_then(|n| n.parse().ok()).unwrap_or(3);
    let shape = args.next();
    let mut sizes = Sizes::full();
    if let (Some(listed), Some(events)) = (args.next(), args.next()) {
        sizes.listed = listed.parse().expect("listed: a number");
        sizes.events = events.parse().expect("events: a number");
    }
    let data = if shape.as_deref() == Some("realistic") {
        w_inf::Data::realistic(sizes.listed / 10, sizes.events / 10)
    } else {
        w_inf::Data::new(sizes.listed, sizes.events)
    };
    let protobuf = side == "ours-protobuf";
    let encoded = Encoded::new(&data);
    let encoded = Arc::new(if protobuf {
        encoded.with_protobuf(&data)
    } else {
        encoded
    });
    let (pages, watch) = encoded.sizes();
    println!("{pages} bytes of list pages, {watch} bytes of watch stream");
    let rt = w_inf::runtime();
    for _ in 0..runs {
        let backend = Backend::Replay(&encoded);
        let run = match side.as_str() {
            "kube-runtime" => w_http::kube_runtime(&rt, &data, 4, backend, false),
            "ours-without-managed-fields" => {
                w_http::ours(&rt, &data, 4, backend, ManagedFields::Skipped)
            }
            _ => w_http::ours_reading(&rt, &data, 4, backend, ManagedFields::Kept, protobuf),
        };
        println!("{side}: list {:?}, watch {:?}", run.list, run.watch);
        println!("run {} {}", run.list.as_secs_f64(), run.watch.as_secs_f64());
    }
}
