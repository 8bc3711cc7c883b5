//! One side of W-HTTP client only, a few times over, for a profiler:
//! `w_http_client [ours|ours-without-managed-fields|kube-runtime] [runs] [realistic]`. Prints
//! each run's list and watch times; `realistic`: on realistic pods, at a tenth of the sizes.

use std::sync::Arc;

use informer_benches::realistic::ManagedFields;
use informer_benches::replay::Encoded;
use informer_benches::w_http::{self, Backend};
use informer_benches::{Sizes, w_inf};

fn main() {
    let mut args = std::env::args().skip(1);
    let side = args.next().unwrap_or_else(|| "ours".into());
    let runs: usize = args.next().and_then(|n| n.parse().ok()).unwrap_or(3);
    let sizes = Sizes::full();
    let data = if args.next().as_deref() == Some("realistic") {
        w_inf::Data::realistic(sizes.listed / 10, sizes.events / 10)
    } else {
        w_inf::Data::new(sizes.listed, sizes.events)
    };
    let encoded = Arc::new(Encoded::new(&data));
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
            _ => w_http::ours(&rt, &data, 4, backend, ManagedFields::Kept),
        };
        println!("{side}: list {:?}, watch {:?}", run.list, run.watch);
    }
}
