//! A factory's entries: the key an informer is shared under, the informer with its types
//! erased (as the factory runs, waits for and stops it), and its name.

use std::any::{Any, TypeId};
use std::future::Future;
use std::hash::{Hash, Hasher};
use std::pin::Pin;
use std::sync::Arc;

use informer::{Health, HealthOptions, InformerError, InformerStats, SharedIndexInformer};
use informer_reflector::{Availability, ReflectorObserver};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::source::Selection;
use crate::sync_report::InformerStatus;

/// What an informer is shared under.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct Key {
    pub(crate) resource: TypeId,
    /// The resource value of an informer asked for with `informer_for` (its type is
    /// `resource`).
    pub(crate) dynamic: Option<DynamicKey>,
    pub(crate) selection: Selection,
    pub(crate) transform: Option<String>,
    /// The name of the informer's own cache, if it has one ([`InformerOptions::cache`]).
    pub(crate) cache: Option<String>,
}

/// A resource value in a sharing key, compared and hashed as its own type.
#[derive(Clone)]
pub(crate) struct DynamicKey(pub(crate) Arc<dyn ErasedKey>);

pub(crate) trait ErasedKey: Any + Send + Sync {
    fn as_any(&self) -> &dyn Any;
    fn eq_erased(&self, other: &dyn ErasedKey) -> bool;
    fn hash_erased(&self, state: &mut dyn Hasher);
}

impl<T: Eq + Hash + Send + Sync + 'static> ErasedKey for T {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn eq_erased(&self, other: &dyn ErasedKey) -> bool {
        other.as_any().downcast_ref::<T>() == Some(self)
    }

    fn hash_erased(&self, mut state: &mut dyn Hasher) {
        self.hash(&mut state);
    }
}

impl PartialEq for DynamicKey {
    fn eq(&self, other: &Self) -> bool {
        (*self.0).eq_erased(&*other.0)
    }
}

impl Eq for DynamicKey {}

impl Hash for DynamicKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (*self.0).hash_erased(state);
    }
}

pub(crate) trait Runnable: Send + Sync {
    fn run(
        self: Arc<Self>,
        stop: CancellationToken,
    ) -> Pin<Box<dyn Future<Output = Result<(), InformerError>> + Send>>;
    fn has_synced(&self) -> bool;
    fn is_stopped(&self) -> bool;
    /// Resolves once the informer has synced or stopped.
    fn wait_for_sync(self: Arc<Self>) -> Pin<Box<dyn Future<Output = bool> + Send>>;
    fn stats(&self) -> InformerStats;
    fn health(&self, options: &HealthOptions) -> Health;
}

impl<O> Runnable for SharedIndexInformer<O>
where
    O: Send + Sync + 'static,
{
    fn run(
        self: Arc<Self>,
        stop: CancellationToken,
    ) -> Pin<Box<dyn Future<Output = Result<(), InformerError>> + Send>> {
        Box::pin(async move { SharedIndexInformer::run(&self, stop).await })
    }

    fn has_synced(&self) -> bool {
        SharedIndexInformer::has_synced(self)
    }

    fn is_stopped(&self) -> bool {
        SharedIndexInformer::is_stopped(self)
    }

    fn wait_for_sync(self: Arc<Self>) -> Pin<Box<dyn Future<Output = bool> + Send>> {
        Box::pin(async move { SharedIndexInformer::wait_for_sync(&self).await })
    }

    fn stats(&self) -> InformerStats {
        SharedIndexInformer::stats(self)
    }

    fn health(&self, options: &HealthOptions) -> Health {
        SharedIndexInformer::health(self, options)
    }
}

pub(crate) struct Entry {
    /// Tells this entry's run task apart from the others (see `State::tasks`).
    pub(crate) id: u64,
    pub(crate) resource: &'static str,
    pub(crate) dynamic: Option<String>,
    pub(crate) selection: Selection,
    pub(crate) transform: Option<String>,
    /// The typed informer, downcast by `informer_with`.
    pub(crate) informer: Arc<dyn Any + Send + Sync>,
    pub(crate) runner: Arc<dyn Runnable>,
    pub(crate) started: bool,
    /// Stops this informer alone (a child of the factory's stop token).
    pub(crate) stop: CancellationToken,
    /// Whether the server serves its resource, as its reflector tells.
    pub(crate) availability: watch::Receiver<Availability>,
    /// Its reflector's observer, told when the informer is removed.
    pub(crate) observer: Option<Arc<dyn ReflectorObserver>>,
}

impl Entry {
    pub(crate) fn describe(&self) -> String {
        describe(
            self.dynamic.as_deref().unwrap_or(self.resource),
            &self.selection,
            self.transform.as_deref(),
        )
    }

    pub(crate) fn status(&self) -> InformerStatus {
        InformerStatus {
            resource: self.resource,
            dynamic: self.dynamic.clone(),
            selection: self.selection.clone(),
            transform: self.transform.clone(),
            started: self.started,
            synced: self.runner.has_synced(),
            stopped: self.runner.is_stopped(),
            availability: *self.availability.borrow(),
        }
    }
}

/// An informer's name: its resource type without module paths, then its selection, e.g.
/// `Pod(all, labels=tier=gold)` or `Metadata<Pod>(namespace=a)`.
pub(crate) fn describe(resource: &str, selection: &Selection, transform: Option<&str>) -> String {
    let mut out = short_type_name(resource);
    let mut parts = Vec::new();
    match &selection.namespace {
        Some(ns) => parts.push(format!("namespace={ns}")),
        None => parts.push("all".to_owned()),
    }
    if let Some(l) = &selection.label_selector {
        parts.push(format!("labels={l}"));
    }
    if let Some(f) = &selection.field_selector {
        parts.push(format!("fields={f}"));
    }
    if let Some(shards) = &selection.shards {
        let by = match selection.shard_by {
            informer_reflector::ShardBy::Object => "",
            informer_reflector::ShardBy::Owner => " by owner",
        };
        parts.push(format!("shards={shards}{by}"));
    }
    if let Some(t) = transform {
        parts.push(format!("transform={t}"));
    }
    out.push_str(&format!("({})", parts.join(", ")));
    out
}

/// `a::b::Pod` → `Pod`, `x::Metadata<a::b::Pod>` → `Metadata<Pod>`: every path segment but the
/// last dropped, generic arguments included.
fn short_type_name(full: &str) -> String {
    let mut out = String::with_capacity(full.len());
    let mut segment = String::new();
    for c in full.chars() {
        if c.is_alphanumeric() || c == '_' || c == ':' {
            segment.push(c);
        } else {
            out.push_str(segment.rsplit("::").next().unwrap_or_default());
            segment.clear();
            out.push(c);
        }
    }
    out.push_str(segment.rsplit("::").next().unwrap_or_default());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn informer_names_are_short_and_carry_the_selection() {
        assert_eq!(
            describe("k8s_openapi::api::core::v1::Pod", &Selection::all(), None),
            "Pod(all)"
        );
        assert_eq!(
            describe(
                "informer_kube::factory::Metadata<k8s_openapi::api::core::v1::Pod>",
                &Selection::all().namespace("a").labels("tier=gold"),
                Some("strip"),
            ),
            "Metadata<Pod>(namespace=a, labels=tier=gold, transform=strip)"
        );
    }
}
