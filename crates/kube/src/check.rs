//! [`check_at_same_version`]: compares a cache with the server's state at the cache's own
//! resource version, so that the verdict holds on a cluster that keeps changing.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;

use kube::api::{Api, ListParams, VersionMatch};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;

use informer::SharedIndexInformer;

/// A cache's content at one resource version: `namespace/name` (or `name`) → the object's
/// `resourceVersion`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// The resource version the content is at.
    pub resource_version: String,
    /// Key → the object's resource version.
    pub objects: BTreeMap<String, String>,
}

/// The outcome of [`check_at_same_version`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheCheck {
    /// The cache equals the server's list at exactly `resource_version`.
    Match {
        /// The version compared at.
        resource_version: String,
        /// How many objects were compared.
        objects: usize,
    },
    /// The cache differed from the server at every version tried; these are the differences at
    /// the last one.
    Differs {
        /// The last version compared at.
        resource_version: String,
        /// One line per differing key.
        differences: Vec<String>,
    },
    /// No comparison could be made (every version tried was compacted away, the cache never
    /// held still, or the server refused the list); this is not a pass.
    Unchecked {
        /// Why.
        reason: String,
    },
}

impl CacheCheck {
    /// Whether the cache was compared and matched.
    pub fn passed(&self) -> bool {
        matches!(self, Self::Match { .. })
    }
}

impl fmt::Display for CacheCheck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Match {
                resource_version,
                objects,
            } => write!(
                f,
                "matches the server at resourceVersion {resource_version} ({objects} objects)"
            ),
            Self::Differs {
                resource_version,
                differences,
            } => write!(
                f,
                "differs from the server at resourceVersion {resource_version}: {} difference(s), first: {}",
                differences.len(),
                differences.first().map_or("", String::as_str)
            ),
            Self::Unchecked { reason } => write!(f, "could not be checked: {reason}"),
        }
    }
}

fn key_of<K: Resource>(object: &K) -> String {
    match object.namespace() {
        Some(ns) if !ns.is_empty() => format!("{ns}/{}", object.name_any()),
        _ => object.name_any(),
    }
}

/// A snapshot of an informer's cache at its last synced resource version, or `None` if the
/// version moved while the cache was read (try again) or nothing was synced yet.
///
/// The informer's version is its reflector's; the cache can trail it by the events still queued,
/// which [`check_at_same_version`] absorbs by trying again at a later version.
pub fn informer_snapshot<K>(informer: &SharedIndexInformer<K>) -> Option<Snapshot>
where
    K: Resource + Clone + DeserializeOwned + fmt::Debug + Send + Sync + 'static,
{
    let before = informer.last_sync_resource_version();
    let objects = informer
        .lister()
        .list(&informer_store::Everything)
        .iter()
        .map(|o| (key_of(&**o), o.resource_version().unwrap_or_default()))
        .collect();
    let after = informer.last_sync_resource_version();
    (before == after && !before.is_empty()).then_some(Snapshot {
        resource_version: before,
        objects,
    })
}

/// The differences between the server's state and a snapshot, one line per key.
fn differences(server: &BTreeMap<String, String>, cache: &BTreeMap<String, String>) -> Vec<String> {
    let mut out = Vec::new();
    for (key, rv) in server {
        match cache.get(key) {
            None => out.push(format!("{key}: missing from the cache (server at {rv})")),
            Some(cached) if cached != rv => {
                out.push(format!("{key}: cache at {cached}, server at {rv}"));
            }
            Some(_) => {}
        }
    }
    for key in cache.keys().filter(|k| !server.contains_key(*k)) {
        out.push(format!("{key}: in the cache, not on the server"));
    }
    out
}

/// The server's state at exactly `rv` (`resourceVersionMatch=Exact`, in pages of 500).
async fn list_exact<K>(api: &Api<K>, rv: &str) -> Result<BTreeMap<String, String>, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + fmt::Debug,
{
    let mut objects = BTreeMap::new();
    let mut token: Option<String> = None;
    loop {
        let lp = ListParams {
            limit: Some(500),
            continue_token: token.clone(),
            resource_version: token.is_none().then(|| rv.to_owned()),
            version_match: token.is_none().then_some(VersionMatch::Exact),
            ..ListParams::default()
        };
        let page = api.list(&lp).await?;
        objects.extend(
            page.items
                .iter()
                .map(|o| (key_of(o), o.resource_version().unwrap_or_default())),
        );
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(next) => token = Some(next),
            None => return Ok(objects),
        }
    }
}

/// Compares a cache with the server at the cache's own resource version.
///
/// `snapshot` gives the cache's content and the version it is at (`None` while it is not
/// settled, see [`informer_snapshot`]). The server's state at exactly that version is listed
/// with `resourceVersionMatch=Exact`, so changes made since do not count as differences. A
/// `410 Gone` (the version was compacted) or a difference (the cache trailing its version by a
/// queued event) is retried at the cache's next version, up to `attempts` times. The
/// verdict is [`CacheCheck::Unchecked`] when no comparison could be made.
///
/// `pause` is awaited between attempts (e.g. `|| tokio::time::sleep(half_a_second)`), giving
/// the cache time to settle or to move past a compacted version.
pub async fn check_at_same_version<K, F>(
    api: &Api<K>,
    mut snapshot: impl FnMut() -> Option<Snapshot>,
    attempts: u32,
    mut pause: impl FnMut() -> F,
) -> CacheCheck
where
    K: Resource + Clone + DeserializeOwned + fmt::Debug,
    F: Future<Output = ()>,
{
    let mut last_differs = None;
    let mut reason = "the cache never held still at one resourceVersion".to_owned();
    for attempt in 0..attempts.max(1) {
        if attempt > 0 {
            pause().await;
        }
        let Some(snap) = snapshot() else { continue };
        match list_exact(api, &snap.resource_version).await {
            Ok(server) => {
                let found = differences(&server, &snap.objects);
                if found.is_empty() {
                    return CacheCheck::Match {
                        resource_version: snap.resource_version,
                        objects: server.len(),
                    };
                }
                last_differs = Some(CacheCheck::Differs {
                    resource_version: snap.resource_version,
                    differences: found,
                });
            }
            Err(kube::Error::Api(status)) if status.code == 410 => {
                reason = format!(
                    "resourceVersion {} is no longer on the server (410: {})",
                    snap.resource_version, status.message
                );
            }
            Err(err) => {
                return CacheCheck::Unchecked {
                    reason: format!("the exact list failed: {err}"),
                };
            }
        }
    }
    last_differs.unwrap_or(CacheCheck::Unchecked { reason })
}
