//! The informer's promise, over seeded random scenarios: once the source is quiet, the cache
//! equals the server's state, and replaying each handler's notifications gives the cache.

use crate::common;

use informer::HandlerOptions;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use common::*;

/// A tiny deterministic generator (xorshift).
struct Rng(u64);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

async fn scenario(seed: u64, kind: Kind) {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut rv = 0u64;
    let mut server: BTreeMap<String, Arc<Obj>> = BTreeMap::new();
    for i in 0..10 {
        rv += 1;
        let o = obj("ns", &format!("o{i}"), rv);
        server.insert(key(&o), o);
    }
    let source = ChannelSource::new();
    source.push_list(server.values().cloned().collect(), rv);
    let mut watch = source.open_watch();
    let informer = Arc::new(informer(&source, Duration::ZERO, kind));
    let early = Recorder::new();
    informer
        .add_event_handler(early.clone(), HandlerOptions::new())
        .unwrap();
    let (stop, task) = start(&informer);
    let mut late = None;
    let mut outage = false;

    for step in 0..300 {
        let name = format!("o{}", rng.below(20));
        let k = format!("ns/{name}");
        rv += 1;
        let event = rng.below(10);
        if event == 0 && !outage {
            // The watch breaks; changes made until the relist are never sent as events.
            outage = true;
            watch.expire();
        } else if event == 1 && outage {
            // The relist sees the server as it is now.
            outage = false;
            source.push_list(server.values().cloned().collect(), rv);
            watch = source.open_watch();
        } else {
            let exists = server.contains_key(&k);
            if exists && rng.below(3) == 0 {
                server.remove(&k);
                if !outage {
                    watch.deleted(&obj("ns", &name, rv));
                }
            } else {
                let o = on_node("ns", &name, rv, &format!("n{}", rng.below(3)));
                server.insert(k, Arc::clone(&o));
                match (outage, exists) {
                    (true, _) => {}
                    (false, true) => watch.modified(&o),
                    (false, false) => watch.added(&o),
                }
            }
        }
        if step == 150 {
            let r = Recorder::new();
            informer
                .add_event_handler(r.clone(), HandlerOptions::new())
                .unwrap();
            late = Some(r);
        }
        if step % 25 == 0 {
            tokio::task::yield_now().await;
        }
    }
    if outage {
        source.push_list(server.values().cloned().collect(), rv);
        watch = source.open_watch();
    }
    let expected: BTreeMap<String, u64> = server.iter().map(|(k, o)| (k.clone(), o.rv)).collect();
    let late = late.unwrap();
    eventually(&format!("seed {seed}: cache converges"), || {
        cache(&informer) == expected
    })
    .await;
    eventually(&format!("seed {seed}: early handler converges"), || {
        early.replay() == expected
    })
    .await;
    eventually(&format!("seed {seed}: late handler converges"), || {
        late.replay() == expected
    })
    .await;
    drop(watch);
    stop.cancel();
    task.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handlers_and_cache_converge_on_delta_fifo() {
    for seed in 1..=15 {
        scenario(seed, Kind::DeltaFifo).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handlers_and_cache_converge_on_in_order_fifo() {
    for seed in 1..=15 {
        scenario(seed, Kind::InOrder).await;
    }
}
