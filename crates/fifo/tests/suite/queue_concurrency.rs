//! Several producers updating their own keys while one consumer pops: nothing is lost, and each
//! producer's changes arrive in the order it made them. And a reflector writing every kind of
//! change while the consumer's changes are in flight: the cache ends as the reflector left it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::thread;

use informer_fifo::{DeltaFifo, DeltaFifoOptions, InOrderFifo, InOrderFifoOptions, Queue};
use informer_store::{KnownObjects, ThreadSafeStore};
use informer_testing::fifo::conformance::{TestObject, apply, contents, key_func, obj};

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

const KEYS: usize = 12;
const REFLECTOR_WRITES: u64 = 20_000;

/// A tiny deterministic generator (xorshift).
struct Rng(u64);
impl Rng {
    fn next(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// One reflector writes adds, updates, deletes, relists and resyncs, while the consumer applies
/// each change to the cache the queue reads back, in batches, yielding before each change so that
/// writes land while changes are in flight (taken off the queue, not in the cache yet). The cache
/// must end exactly as the reflector's last writes say.
fn reflector_racing_unlocked_pops(
    queue_over: impl Fn(Arc<dyn KnownObjects<TestObject>>) -> Arc<dyn Queue<TestObject>>,
) {
    let cache = Arc::new(ThreadSafeStore::new(key_func()));
    let queue = queue_over(cache.clone());
    let consumer = {
        let (queue, cache) = (Arc::clone(&queue), Arc::clone(&cache));
        thread::spawn(move || {
            while queue
                .pop_batch(4, &mut |deltas, _| {
                    thread::yield_now();
                    apply(&cache, &deltas);
                })
                .is_ok()
            {}
        })
    };
    let mut truth: BTreeMap<String, u64> = BTreeMap::new();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for v in 1..=REFLECTOR_WRITES {
        let name = format!("k{}", rng.next(KEYS));
        match rng.next(20) {
            0..=9 => {
                queue.update(obj("ns", &name, v)).unwrap();
                truth.insert(format!("ns/{name}"), v);
            }
            10..=15 => {
                queue.delete(obj("ns", &name, v)).unwrap();
                truth.remove(&format!("ns/{name}"));
            }
            16 | 17 => {
                let listed: Vec<usize> = (0..KEYS).filter(|_| rng.next(2) == 0).collect();
                let list = listed
                    .iter()
                    .map(|k| obj("ns", &format!("k{k}"), v))
                    .collect();
                queue.replace(list, v.to_string()).unwrap();
                truth = listed.iter().map(|k| (format!("ns/k{k}"), v)).collect();
            }
            _ => queue.resync().unwrap(),
        }
    }
    queue.close();
    consumer.join().expect("consumer does not panic");
    let expected: Vec<String> = truth.iter().map(|(k, v)| format!("{k}@{v}")).collect();
    assert_eq!(contents(&cache), expected);
}

#[test]
fn delta_fifo_leaves_the_cache_as_the_reflector_left_it() {
    reflector_racing_unlocked_pops(|known| {
        Arc::new(DeltaFifo::with_options(
            key_func(),
            DeltaFifoOptions::default().known_objects(known),
        ))
    });
}

#[test]
fn in_order_fifo_leaves_the_cache_as_the_reflector_left_it() {
    reflector_racing_unlocked_pops(|known| {
        Arc::new(InOrderFifo::with_options(
            key_func(),
            InOrderFifoOptions::default().known_objects(known),
        ))
    });
}
