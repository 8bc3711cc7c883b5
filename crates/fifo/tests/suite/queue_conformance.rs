//! Every queue passes the shared `Queue` conformance suite.

use informer_fifo::{DeltaFifo, DeltaFifoOptions, InOrderFifo, InOrderFifoOptions};
use informer_testing::fifo::conformance;

#[test]
fn delta_fifo_passes_the_queue_suite() {
    conformance::queue_suite(|parts| {
        let mut options = DeltaFifoOptions::default();
        options.known_objects = parts.known_objects;
        options.transform = parts.transform;
        options.on_refused = parts.on_refused;
        DeltaFifo::with_options(parts.key_func, options)
    });
}

#[test]
fn in_order_fifo_passes_the_queue_suite() {
    conformance::queue_suite(|parts| {
        let mut options = InOrderFifoOptions::default();
        options.known_objects = parts.known_objects;
        options.transform = parts.transform;
        options.on_refused = parts.on_refused;
        InOrderFifo::with_options(parts.key_func, options)
    });
}

#[test]
fn atomic_in_order_fifo_passes_the_queue_suite() {
    conformance::atomic_queue_suite(|parts| {
        let mut options = InOrderFifoOptions::default().atomic(true);
        options.known_objects = parts.known_objects;
        options.transform = parts.transform;
        options.on_refused = parts.on_refused;
        InOrderFifo::with_options(parts.key_func, options)
    });
}
