//! The store and its secondary indexes at work on generated pods.
//!
//! Builds a `ThreadSafeStore` of k8s-openapi `Pod`s with the `namespace`, `node` and `app`
//! indexes, fills it, reschedules and relabels pods, deletes some, replaces the whole content (as a
//! relist does), and after every phase checks each index against a brute-force scan.
//!
//! ```sh
//! cargo run --release --example indexer -- [PODS]   # default 100000
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use informer_store::{
    IndexValues, Indexer, KeyError, KnownObjects, Lister, NAMESPACE_INDEX, ReflectorStore, Store,
    ThreadSafeStore, index_func, indexers, key_func, meta_namespace_key,
};
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

const NAMESPACES: usize = 100;
const NODES: usize = 1000;
const APPS: usize = 50;

fn pod(i: usize, node: usize, app: usize, resource_version: u64) -> Arc<Pod> {
    Arc::new(Pod {
        metadata: ObjectMeta {
            name: Some(format!("pod-{i}")),
            namespace: Some(format!("ns-{}", i % NAMESPACES)),
            labels: Some(BTreeMap::from([("app".to_owned(), format!("app-{app}"))])),
            resource_version: Some(resource_version.to_string()),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            node_name: Some(format!("node-{node}")),
            containers: vec![Container {
                name: "c".to_owned(),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
        status: None,
    })
}

fn node_of(p: &Pod) -> Option<&str> {
    p.spec.as_ref()?.node_name.as_deref()
}

fn app_of(p: &Pod) -> Option<&str> {
    p.metadata.labels.as_ref()?.get("app").map(String::as_str)
}

/// Reads one index's value off a pod.
type ValueOf = fn(&Pod) -> Option<&str>;

/// Every index, checked value by value against a scan of the whole store.
fn check(store: &ThreadSafeStore<Pod>) -> Result<(), String> {
    let all = store.list();
    let scans: [(&str, ValueOf); 3] = [
        (NAMESPACE_INDEX, |p| p.metadata.namespace.as_deref()),
        ("node", node_of),
        ("app", app_of),
    ];
    for (index, value_of) in scans {
        let mut expected: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
        for p in &all {
            if let Some(v) = value_of(p) {
                let key = meta_namespace_key(
                    p.metadata.namespace.as_deref(),
                    p.metadata.name.as_deref().unwrap_or_default(),
                )
                .map_err(|e| e.to_string())?;
                expected.entry(v).or_default().insert(key);
            }
        }
        let values: BTreeSet<String> = store.list_index_func_values(index).into_iter().collect();
        if values.len() != expected.len() {
            return Err(format!(
                "index {index}: {} values, a scan finds {}",
                values.len(),
                expected.len()
            ));
        }
        for (value, keys) in expected {
            let got: BTreeSet<String> = store
                .index_keys(index, value)
                .map_err(|e| e.to_string())?
                .into_iter()
                .collect();
            if got != keys {
                return Err(format!(
                    "index {index}={value}: {} keys, a scan finds {}",
                    got.len(),
                    keys.len()
                ));
            }
        }
    }
    Ok(())
}

fn phase(
    name: &str,
    ops: usize,
    store: &ThreadSafeStore<Pod>,
    started: Instant,
) -> Result<(), String> {
    let elapsed = started.elapsed();
    let per_op = elapsed.as_nanos() as f64 / ops.max(1) as f64;
    let checked = Instant::now();
    check(store)?;
    println!(
        "{name:<34} {ops:>8} ops {:>9.1} ms {per_op:>8.0} ns/op   cache {:>7} pods   indexes exact ({:.0} ms to verify)",
        elapsed.as_secs_f64() * 1e3,
        store.len(),
        checked.elapsed().as_secs_f64() * 1e3,
    );
    Ok(())
}

fn run(n: usize) -> Result<(), String> {
    // The store: pods keyed `namespace/name`, with three secondary indexes, each an index
    // function from a pod to the values it is filed under.
    let store = Arc::new(ThreadSafeStore::with_indexers(
        key_func(|p: &Pod| {
            let name = p.metadata.name.as_deref().ok_or(KeyError::MissingName)?;
            meta_namespace_key(p.metadata.namespace.as_deref(), name)
        }),
        indexers([
            (
                NAMESPACE_INDEX,
                index_func(|p: &Pod| Ok(p.metadata.namespace.as_deref().into())),
            ),
            (
                "node",
                index_func(|p: &Pod| Ok(node_of(p).map(IndexValues::one).unwrap_or_default())),
            ),
            (
                "app",
                index_func(|p: &Pod| Ok(app_of(p).map(IndexValues::one).unwrap_or_default())),
            ),
        ]),
    ));
    let mut rv = 0u64;
    let mut next_rv = || {
        rv += 1;
        rv
    };
    println!(
        "informer-store: {n} pods, {NAMESPACES} namespaces, {NODES} nodes, indexes namespace/node/app\n"
    );

    let pods: Vec<Arc<Pod>> = (0..n)
        .map(|i| pod(i, i % NODES, i % APPS, next_rv()))
        .collect();
    let t = Instant::now();
    for p in &pods {
        store.add(Arc::clone(p)).map_err(|e| e.to_string())?;
    }
    phase("add", n, &store, t)?;

    let moved: Vec<Arc<Pod>> = (0..n)
        .map(|i| pod(i, (i + 1) % NODES, i % APPS, next_rv()))
        .collect();
    let t = Instant::now();
    for p in &moved {
        store.update(Arc::clone(p)).map_err(|e| e.to_string())?;
    }
    phase("update (every pod rescheduled)", n, &store, t)?;

    let relabelled: Vec<Arc<Pod>> = (0..n)
        .step_by(2)
        .map(|i| pod(i, (i + 1) % NODES, (i + 7) % APPS, next_rv()))
        .collect();
    let t = Instant::now();
    for p in &relabelled {
        store.update(Arc::clone(p)).map_err(|e| e.to_string())?;
    }
    phase("update (half relabelled)", relabelled.len(), &store, t)?;

    let t = Instant::now();
    let mut found = 0;
    for j in 0..10_000 {
        found += store
            .by_index("node", &format!("node-{}", j % NODES))
            .map_err(|e| e.to_string())?
            .len();
    }
    phase("by_index(node) x 10,000", 10_000, &store, t)?;
    println!("{:<34} {found} pods found in all", "");

    let t = Instant::now();
    for p in pods.iter().step_by(3) {
        store.delete(Arc::clone(p)).map_err(|e| e.to_string())?;
    }
    phase("delete (a third)", pods.len().div_ceil(3), &store, t)?;

    let relist: Vec<Arc<Pod>> = (0..n / 2)
        .map(|i| pod(i, i % NODES, i % APPS, next_rv()))
        .collect();
    let t = Instant::now();
    store
        .replace(relist, rv.to_string())
        .map_err(|e| e.to_string())?;
    phase("replace (relist of half)", 1, &store, t)?;

    let lister = Lister::new(store.clone());
    let web_in_ns0 = lister
        .namespace("ns-0")
        .list(&|p: &Pod| app_of(p) == Some("app-0"));
    let first = lister
        .get_namespaced("ns-1", "pod-1")
        .map(|p| node_of(&p).unwrap_or_default().to_owned());
    println!(
        "\nlister: {} pods of app-0 in ns-0; ns-1/pod-1 runs on {}; last sync resource version {}",
        web_in_ns0.len(),
        first.as_deref().unwrap_or("(gone)"),
        store.last_sync_resource_version().unwrap_or_default(),
    );
    if store.list_keys().len() != n / 2 {
        return Err(format!(
            "expected {} pods after the relist, found {}",
            n / 2,
            store.len()
        ));
    }
    println!("\nOK: every index matched a full scan after every phase.");
    Ok(())
}

fn main() -> ExitCode {
    let n = match std::env::args().nth(1).map(|a| a.parse::<usize>()) {
        None => 100_000,
        Some(Ok(n)) if n > 0 => n,
        Some(_) => {
            eprintln!("usage: indexer [PODS]   (a positive number; default 100000)");
            return ExitCode::from(2);
        }
    };
    match run(n) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}
