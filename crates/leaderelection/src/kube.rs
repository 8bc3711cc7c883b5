//! The lock on a `coordination.k8s.io/v1` Lease, through kube-client.

use std::time::{Duration, SystemTime};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};

use crate::lock::{LeaderRecord, LeaseLock, LockError, Observed};

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
