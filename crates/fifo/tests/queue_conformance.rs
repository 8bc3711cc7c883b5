//! Every queue passes the shared `Queue` conformance suite.

use informer_fifo::{DeltaFIFO, DeltaFIFOOptions, InOrderFIFO, InOrderFIFOOptions};
use informer_testing::fifo::conformance;

#[test]
fn delta_fifo_passes_the_queue_suite() {
    conformance::queue_suite(|parts| {
        let mut options = DeltaFIFOOptions::default();
        options.known_objects = parts.known_objects;
        options.transform = parts.transform;
        options.on_refused = parts.on_refused;
        DeltaFIFO::with_options(parts.key_func, options)
    });
}

#[test]
fn in_order_fifo_passes_the_queue_suite() {
    conformance::queue_suite(|parts| {
        let mut options = InOrderFIFOOptions::default();
        options.known_objects = parts.known_objects;
        options.transform = parts.transform;
        options.on_refused = parts.on_refused;
        InOrderFIFO::with_options(parts.key_func, options)
    });
}
