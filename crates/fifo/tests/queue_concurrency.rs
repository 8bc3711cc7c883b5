//! Several producers updating their own keys while one consumer pops: nothing is lost, and each
//! producer's changes arrive in the order it made them.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::thread;

use informer_fifo::{DeltaFifo, InOrderFifo, Queue};
use informer_testing::fifo::conformance::{TestObject, key_func, obj};

const PRODUCERS: usize = 4;
const KEYS_PER_PRODUCER: u64 = 8;
const WRITES_PER_PRODUCER: u64 = 2_000;

/// Producer `p` writes version `v` (1..=WRITES) of key `p{p}/k{v % KEYS}`. Returns, per key, the
/// versions the consumer saw, in the order it saw them.
fn run(queue: Arc<dyn Queue<TestObject>>) -> BTreeMap<String, Vec<u64>> {
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let q = Arc::clone(&queue);
            thread::spawn(move || {
                for v in 1..=WRITES_PER_PRODUCER {
                    let o = obj(&format!("p{p}"), &format!("k{}", v % KEYS_PER_PRODUCER), v);
                    if v <= KEYS_PER_PRODUCER {
                        q.add(o).unwrap();
                    } else {
                        q.update(o).unwrap();
                    }
                }
            })
        })
        .collect();
    let consumer = {
        let q = Arc::clone(&queue);
        thread::spawn(move || {
            let mut seen: BTreeMap<String, Vec<u64>> = BTreeMap::new();
            while q
                .pop(&mut |deltas, _| {
                    for delta in deltas.iter() {
                        let o = delta.object().expect("only live objects are written");
                        seen.entry(format!("{}/{}", o.namespace, o.name))
                            .or_default()
                            .push(o.resource_version);
                    }
                })
                .is_ok()
            {}
            seen
        })
    };
    for producer in producers {
        producer.join().expect("producer does not panic");
    }
    queue.close();
    consumer.join().expect("consumer does not panic")
}

fn expected_versions(key: u64) -> Vec<u64> {
    (1..=WRITES_PER_PRODUCER)
        .filter(|v| v % KEYS_PER_PRODUCER == key)
        .collect()
}

#[test]
fn delta_fifo_keeps_every_change_of_every_key_in_order() {
    // The DeltaFifo coalesces per key but never drops a delta: each key's deltas, concatenated
    // over its pops, are exactly what its producer wrote.
    let seen = run(Arc::new(DeltaFifo::new(key_func())));
    assert_eq!(seen.len(), PRODUCERS * KEYS_PER_PRODUCER as usize);
    for (key, versions) in &seen {
        let k: u64 = key.rsplit_once("/k").unwrap().1.parse().unwrap();
        assert_eq!(versions, &expected_versions(k), "{key}");
    }
}

#[test]
fn in_order_fifo_delivers_every_write_in_producer_order() {
    let seen = run(Arc::new(InOrderFifo::new(key_func())));
    for p in 0..PRODUCERS {
        for k in 0..KEYS_PER_PRODUCER {
            assert_eq!(
                seen[&format!("p{p}/k{k}")],
                expected_versions(k),
                "p{p}/k{k}"
            );
        }
    }
}
