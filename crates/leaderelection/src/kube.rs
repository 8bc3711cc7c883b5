//! The lock on a `coordination.k8s.io/v1` Lease, and the Leases of a namespace as a
//! [`LeaseStore`], through kube-client.

use std::time::{Duration, SystemTime};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use std::sync::Arc;

use kube::api::{Api, ListParams, PostParams};

use crate::lock::{LeaderRecord, LeaseLock, LockError, Observed};
use crate::store::LeaseStore;

/// A [`LeaseLock`] on the Lease `namespace/name`: reads with `GET`, acquires a missing lease
/// with `POST`, and writes with `PUT` carrying the `resourceVersion` read, so that a write
/// over a lease changed meanwhile is refused with 409 Conflict.
#[derive(Clone)]
pub struct KubeLease {
    api: Api<Lease>,
    namespace: String,
    name: String,
}

impl std::fmt::Debug for KubeLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KubeLease({})", self.describe())
    }
}

impl KubeLease {
    /// The lock on the Lease `name` in `namespace`.
    pub fn new(client: kube::Client, namespace: &str, name: &str) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        }
    }

    fn lease(&self, record: &LeaderRecord, version: Option<&str>) -> Lease {
        let micro =
            |t: Option<SystemTime>| t.and_then(|t| Timestamp::try_from(t).ok()).map(MicroTime);
        Lease {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                namespace: Some(self.namespace.clone()),
                resource_version: version.map(str::to_owned),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: record.holder.clone(),
                lease_duration_seconds: Some(
                    i32::try_from(record.lease_duration.as_secs()).unwrap_or(i32::MAX),
                ),
                acquire_time: micro(record.acquire_time),
                renew_time: micro(record.renew_time),
                lease_transitions: Some(i32::try_from(record.transitions).unwrap_or(i32::MAX)),
                ..LeaseSpec::default()
            }),
        }
    }
}

/// The record a Lease holds (an empty holder is a free lease, as client-go writes on release).
fn observed(lease: Lease) -> Observed {
    let spec = lease.spec.unwrap_or_default();
    let time = |t: Option<MicroTime>| t.map(|t| SystemTime::from(t.0));
    Observed {
        record: LeaderRecord {
            holder: spec.holder_identity.filter(|h| !h.is_empty()),
            lease_duration: Duration::from_secs(
                u64::try_from(spec.lease_duration_seconds.unwrap_or(0)).unwrap_or(0),
            ),
            acquire_time: time(spec.acquire_time),
            renew_time: time(spec.renew_time),
            transitions: u32::try_from(spec.lease_transitions.unwrap_or(0)).unwrap_or(0),
        },
        version: lease.metadata.resource_version.unwrap_or_default(),
    }
}

fn lock_error(e: kube::Error) -> LockError {
    match &e {
        kube::Error::Api(status) if status.code == 409 && status.reason == "AlreadyExists" => {
            LockError::AlreadyExists
        }
        kube::Error::Api(status) if status.code == 409 => LockError::Conflict,
        kube::Error::Api(status) if status.code == 404 => LockError::NotFound,
        _ => LockError::Storage(Box::new(e)),
    }
}

#[async_trait::async_trait]
impl LeaseLock for KubeLease {
    async fn get(&self) -> Result<Option<Observed>, LockError> {
        match self.api.get_opt(&self.name).await {
            Ok(lease) => Ok(lease.map(observed)),
            Err(e) => Err(lock_error(e)),
        }
    }

    async fn create(&self, record: &LeaderRecord) -> Result<Observed, LockError> {
        self.api
            .create(&PostParams::default(), &self.lease(record, None))
            .await
            .map(observed)
            .map_err(lock_error)
    }

    async fn update(&self, version: &str, record: &LeaderRecord) -> Result<Observed, LockError> {
        self.api
            .replace(
                &self.name,
                &PostParams::default(),
                &self.lease(record, Some(version)),
            )
            .await
            .map(observed)
            .map_err(lock_error)
    }

    fn describe(&self) -> String {
        format!("leases/{}/{}", self.namespace, self.name)
    }
}

/// The Leases of one namespace as a [`LeaseStore`]: [`KubeLease`] locks by name, and a list of
/// the namespace's Leases filtered by name prefix (keep sharded controllers' Leases in a
/// namespace without thousands of others: every replica lists them each retry period).
#[derive(Clone)]
pub struct KubeLeases {
    client: kube::Client,
    api: Api<Lease>,
    namespace: String,
}

impl std::fmt::Debug for KubeLeases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KubeLeases({})", self.describe())
    }
}

impl KubeLeases {
    /// The Leases of `namespace`.
    pub fn new(client: kube::Client, namespace: &str) -> Self {
        Self {
            api: Api::namespaced(client.clone(), namespace),
            client,
            namespace: namespace.to_owned(),
        }
    }
}

#[async_trait::async_trait]
impl LeaseStore for KubeLeases {
    fn lock(&self, name: &str) -> Arc<dyn LeaseLock> {
        Arc::new(KubeLease::new(self.client.clone(), &self.namespace, name))
    }

    async fn list(&self, prefix: &str) -> Result<Vec<(String, Observed)>, LockError> {
        let leases = self
            .api
            .list(&ListParams::default())
            .await
            .map_err(lock_error)?;
        Ok(leases
            .items
            .into_iter()
            .filter_map(|lease| {
                let name = lease.metadata.name.clone()?;
                name.starts_with(prefix).then(|| (name, observed(lease)))
            })
            .collect())
    }

    fn describe(&self) -> String {
        format!("leases/{}", self.namespace)
    }
}
