//! The final check: every cache, every handler's view and the `node` index against the server,
//! object by object at the same resourceVersion; and, with `--cluster`, each cache against the
//! cluster's list at the cache's own resourceVersion.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use informers::apiserver::ApiServer;
use informers::k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use informers::kube::{CacheCheck, Snapshot, check_at_same_version, informer_snapshot};
use informers::kube_client::{self, Resource, ResourceExt};
use informers::prelude::*;

use crate::BoxError;
use crate::controller::POD_COUNT;
use crate::informers::{Informers, key_of, node_of, rv_of};

/// Checks the caches against the server until they match (they catch up with the last changes
/// first), for at most a minute; returns the last verdict.
pub(crate) async fn until_caught_up(
    server: &ApiServer,
    informers: &Informers,
) -> Result<Verdict, BoxError> {
    let settle = Instant::now();
    loop {
        let verdict = check(server, informers)?;
        if verdict.ok() || settle.elapsed() > Duration::from_secs(60) {
            return Ok(verdict);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// What the final check found.
#[derive(Default)]
pub(crate) struct Verdict {
    pods: usize,
    configmaps: usize,
    nodes_checked: usize,
    namespaces_checked: usize,
    problems: Vec<String>,
}

impl Verdict {
    pub(crate) fn ok(&self) -> bool {
        self.problems.is_empty()
    }

    pub(crate) fn print(&self, settled_in: Duration) {
        if self.ok() {
            println!(
                "CHECK PASSED: the caches match the server exactly — {} pods and {} configmaps, \
                 object by object at the same resourceVersion; the three handlers' views agree; \
                 the node index is exact on {} nodes; the controller's {POD_COUNT} is right in all \
                 {} namespaces (caught up {settled_in:.2?} after the churn stopped).",
                self.pods, self.configmaps, self.nodes_checked, self.namespaces_checked
            );
        } else {
            println!(
                "CHECK FAILED: {} differences between the caches and the server:",
                self.problems.len()
            );
            for problem in self.problems.iter().take(20) {
                println!("  - {problem}");
            }
        }
    }
}

/// Compares one collection: server objects against a key → resourceVersion view.
fn compare(
    what: &str,
    server: &BTreeMap<String, String>,
    view: &HashMap<String, String>,
    problems: &mut Vec<String>,
) {
    for (key, rv) in server {
        match view.get(key) {
            None => problems.push(format!("{what}: {key} missing (server has rv {rv})")),
            Some(seen) if seen != rv => {
                problems.push(format!("{what}: {key} at rv {seen}, server has rv {rv}"));
            }
            Some(_) => {}
        }
    }
    for key in view.keys().filter(|k| !server.contains_key(*k)) {
        problems.push(format!("{what}: {key} present but deleted on the server"));
    }
}

/// Compares both caches and both mirrors with the server's pods and configmaps.
fn compare_all(
    informers: &Informers,
    pods: &BTreeMap<String, String>,
    configmaps: &BTreeMap<String, String>,
    problems: &mut Vec<String>,
) {
    compare("pod cache", pods, &cache_state(&informers.pods), problems);
    let configmap_cache = cache_state(&informers.configmaps);
    compare("configmap cache", configmaps, &configmap_cache, problems);
    compare(
        "pod handler",
        pods,
        &informers.pod_mirror.state.lock(),
        problems,
    );
    let configmap_mirror = informers.configmap_mirror.state.lock();
    compare("configmap handler", configmaps, &configmap_mirror, problems);
}

fn server_state<K>(server: &ApiServer) -> Result<BTreeMap<String, String>, BoxError>
where
    K: Resource + serde::de::DeserializeOwned + informers::k8s_openapi::ListableResource,
{
    let (items, _) = server.list::<K>(None)?;
    Ok(items.iter().map(|o| (key_of(o), rv_of(o))).collect())
}

fn cache_state<K>(informer: &SharedIndexInformer<K>) -> HashMap<String, String>
where
    K: Resource + Send + Sync + 'static + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    K::DynamicType: Default,
{
    informer
        .lister()
        .list(&informer_store::Everything)
        .iter()
        .map(|o| (key_of(&**o), rv_of(&**o)))
        .collect()
}

fn check(server: &ApiServer, informers: &Informers) -> Result<Verdict, BoxError> {
    let per_node = &informers.per_node;
    let pods = server_state::<Pod>(server)?;
    let configmaps = server_state::<ConfigMap>(server)?;
    let mut problems = Vec::new();
    compare_all(informers, &pods, &configmaps, &mut problems);
    if informers.backlog() > 0 {
        problems.push(format!(
            "{} notifications still buffered for handlers",
            informers.backlog()
        ));
    }

    // The node index against the server's pods, and against the per-node handler.
    let (server_pods, _) = server.list::<Pod>(None)?;
    let mut by_node: BTreeMap<String, usize> = BTreeMap::new();
    for p in &server_pods {
        if let Some(node) = node_of(p) {
            *by_node.entry(node.to_owned()).or_default() += 1;
        }
    }
    let indexer = informers.pods.lister();
    for (node, count) in &by_node {
        let indexed = indexer.index_keys("node", node)?.len();
        if indexed != *count {
            problems.push(format!(
                "node index: {node} has {indexed} pods, the server {count}"
            ));
        }
    }
    let indexed_nodes = indexer.index_values("node");
    for node in indexed_nodes
        .iter()
        .filter(|n| !by_node.contains_key(n.as_str()))
    {
        problems.push(format!("node index: {node} listed, but no pod is on it"));
    }
    let counts = per_node.counts.lock();
    // Every deletion carries the pod's last known state, so the counts attribute every pod.
    for (node, count) in &by_node {
        let seen = counts.get(node).copied().unwrap_or_default();
        if seen != *count as i64 {
            problems.push(format!(
                "per-node handler: {node} has {seen} pods, the server {count}"
            ));
        }
    }
    drop(counts);
    let namespaces_checked = check_controller(server, &server_pods, &mut problems)?;
    Ok(Verdict {
        pods: pods.len(),
        configmaps: configmaps.len(),
        nodes_checked: by_node.len(),
        namespaces_checked,
        problems,
    })
}

/// The controller's world: every namespace has its `pod-count`, owned by it, giving the number
/// of pods the server has in it. Returns the namespaces checked.
fn check_controller(
    server: &ApiServer,
    pods: &[Pod],
    problems: &mut Vec<String>,
) -> Result<usize, BoxError> {
    let mut per_namespace: HashMap<&str, usize> = HashMap::new();
    for pod in pods {
        *per_namespace
            .entry(pod.metadata.namespace.as_deref().unwrap_or_default())
            .or_default() += 1;
    }
    let (namespaces, _) = server.list::<Namespace>(None)?;
    for namespace in &namespaces {
        let name = namespace.name_any();
        let want = per_namespace
            .get(name.as_str())
            .copied()
            .unwrap_or_default();
        let Ok(count) = server.get::<ConfigMap>(Some(&name), POD_COUNT) else {
            problems.push(format!("controller: {name} has no {POD_COUNT}"));
            continue;
        };
        let said = count.data.as_ref().and_then(|d| d.get("pods"));
        if said.map(String::as_str) != Some(want.to_string().as_str()) {
            problems.push(format!(
                "controller: {name}/{POD_COUNT} says {said:?} pods, the server has {want}"
            ));
        }
        let owner = count.owner_references().first().map(|r| r.uid.clone());
        if owner != namespace.uid() {
            problems.push(format!(
                "controller: {name}/{POD_COUNT} is owned by {owner:?}, not by its namespace"
            ));
        }
    }
    Ok(namespaces.len())
}

/// `--cluster`: each cache against the cluster's list at exactly the cache's own
/// resourceVersion (resourceVersionMatch=Exact), so that changes made since the cache's last
/// event do not count. A snapshot counts only while the handlers' view equals the cache.
pub(crate) async fn against_cluster(
    client: kube_client::Client,
    informers: &Informers,
) -> ClusterVerdict {
    let pods_api = kube_client::Api::<Pod>::all(client.clone());
    let configmaps_api = kube_client::Api::<ConfigMap>::all(client);
    let pause = || tokio::time::sleep(Duration::from_millis(500));
    let pods = check_at_same_version(
        &pods_api,
        || settled(&informers.pods, &informers.pod_mirror.state.lock()),
        10,
        pause,
    )
    .await;
    let configmaps = check_at_same_version(
        &configmaps_api,
        || {
            settled(
                &informers.configmaps,
                &informers.configmap_mirror.state.lock(),
            )
        },
        10,
        pause,
    )
    .await;
    ClusterVerdict { pods, configmaps }
}

/// What the `--cluster` check found.
pub(crate) struct ClusterVerdict {
    pods: CacheCheck,
    configmaps: CacheCheck,
}

impl ClusterVerdict {
    /// Prints the verdict; whether the check passed.
    pub(crate) fn print(&self) -> bool {
        let checks = [("pods", &self.pods), ("configmaps", &self.configmaps)];
        for (what, check) in checks {
            println!("{what}: the cache {check}");
        }
        if checks.iter().all(|(_, c)| c.passed()) {
            println!(
                "CHECK PASSED: the caches and the handlers' views match the cluster object by object, \
                 each at its own resourceVersion."
            );
            true
        } else if checks
            .iter()
            .any(|(_, c)| matches!(c, CacheCheck::Differs { .. }))
        {
            for (what, check) in checks {
                if let CacheCheck::Differs { differences, .. } = check {
                    for d in differences.iter().take(20) {
                        println!("  {what}: {d}");
                    }
                }
            }
            println!("CHECK FAILED: a cache differs from the cluster at the same resourceVersion.");
            false
        } else {
            println!(
                "CHECK NOT DONE: the caches could not be compared with the cluster (see above)."
            );
            false
        }
    }
}

/// An informer's cache at its last resourceVersion, if its handlers' view is the same.
fn settled<K>(
    informer: &SharedIndexInformer<K>,
    mirror: &HashMap<String, String>,
) -> Option<Snapshot>
where
    K: Resource + Send + Sync + 'static + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    K::DynamicType: Default,
{
    let snapshot = informer_snapshot(informer)?;
    let same = snapshot.objects.len() == mirror.len()
        && snapshot
            .objects
            .iter()
            .all(|(k, rv)| mirror.get(k) == Some(rv));
    same.then_some(snapshot)
}
