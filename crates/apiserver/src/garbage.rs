//! The garbage collector of dependents, with [`Config::garbage_collection`](crate::Config):
//! what kube-controller-manager's garbage collector does for background deletion. Every
//! removed object's `uid` is queued; for each, the objects that name it in
//! `metadata.ownerReferences` are deleted when no other owner of theirs exists, or lose the
//! dangling references when one does.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::deletion::DeleteOptions;
use crate::object_meta::meta_str;
use crate::objects::{Target, Write};
use crate::patch::Patch;
use crate::state::Shared;

/// The field manager of the collector's writes (kube-controller-manager's `User-Agent`).
const MANAGER: &str = "kube-controller-manager";

/// Starts the collector, when the server collects garbage: it runs until the server stops.
pub(crate) fn start(shared: &Arc<Shared>) {
    let Some(mut queue) = shared.removed_queue.lock().take() else {
        return;
    };
    let shutdown = shared.shutdown.clone();
    let shared = Arc::downgrade(shared);
    tokio::spawn(async move {
        loop {
            let uid = tokio::select! {
                () = shutdown.cancelled() => return,
                uid = queue.recv() => match uid {
                    Some(uid) => uid,
                    None => return,
                },
            };
            let Some(shared) = shared.upgrade() else {
                return;
            };
            shared.collect_dependents(&uid);
        }
    });
}

/// A dependent of a removed owner: where it is, and its owner references.
struct Dependent {
    resource: usize,
    namespace: Option<String>,
    name: String,
    owners: Vec<Value>,
}

/// An object's owner references.
fn owner_references(object: &Value) -> Vec<Value> {
    object
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

impl Shared {
    /// The objects that name `owner` among their owner references.
    fn dependents_of(&self, owner: &str) -> Vec<Dependent> {
        let storage = self.storage.read();
        let mut out = Vec::new();
        for (resource, state) in storage.resources.iter().enumerate() {
            if !state.served {
                continue;
            }
            for object in state.objects.values() {
                let owners = owner_references(&object.value);
                if owners.iter().any(|o| o["uid"] == owner) {
                    out.push(Dependent {
                        resource,
                        namespace: meta_str(&object.value, "namespace").map(str::to_owned),
                        name: meta_str(&object.value, "name").unwrap_or("").to_owned(),
                        owners,
                    });
                }
            }
        }
        out
    }

    /// Whether an object with this `uid` is stored.
    fn exists(&self, uid: &str) -> bool {
        let storage = self.storage.read();
        storage.resources.iter().filter(|s| s.served).any(|state| {
            state
                .objects
                .values()
                .any(|o| meta_str(&o.value, "uid") == Some(uid))
        })
    }

    /// Collects the dependents of the removed object `owner`: deleted when they have no other
    /// owner left (their own removal queues their dependents in turn), else stripped of the
    /// references to owners that are gone.
    fn collect_dependents(self: &Arc<Self>, owner: &str) {
        for dependent in self.dependents_of(owner) {
            let target = Target {
                resource: dependent.resource,
                namespace: dependent.namespace.as_deref(),
            };
            let (solid, dangling): (Vec<Value>, Vec<Value>) =
                dependent.owners.into_iter().partition(|o| {
                    o["uid"]
                        .as_str()
                        .is_some_and(|uid| uid != owner && self.exists(uid))
                });
            // Failures (the object gone meanwhile, a conflict) are left: a later removal or
            // nothing at all, as the real collector retries on its own schedule.
            if solid.is_empty() {
                let _ = self.delete(target, &dependent.name, &DeleteOptions::default());
            } else if !dangling.is_empty() {
                let patch = Patch::Merge(json!({"metadata": {"ownerReferences": solid}}));
                let write = Write::by(MANAGER.to_owned(), false);
                let _ = self.patch_as(target, &dependent.name, &patch, &write);
            }
        }
    }
}
