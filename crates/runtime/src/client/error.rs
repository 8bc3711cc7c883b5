//! What a [`Client`](super::Client) read or write can fail with.

use kube::core::Status;

/// Errors of [`Client`](super::Client)'s reads and writes.
///
/// In an `error_policy`: [`ApplyConflict`](Self::ApplyConflict) is no transient failure, and
/// retrying the same apply gets the same answer until the other field manager lets go of the
/// fields, so give it [`Action::await_change`](crate::Action::await_change) (a change of the
/// object wakes the key again) or a long [`requeue`](crate::Action::requeue), and tell
/// someone (an Event); or apply with `force` if this controller is meant to own the fields. A
/// 409 Conflict of a `replace` (a stale `resourceVersion`) is an [`Api`](Self::Api) error and
/// is transient: the next reconcile reads the newer object, and
/// [`Action::backoff`](crate::Action::backoff) fits it, as it fits the other API errors.
/// [`NoInformer`](Self::NoInformer), [`NoNamespace`](Self::NoNamespace) and
/// [`NoName`](Self::NoName) are mistakes in the controller's code: a retry does not help.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The client has no informer of this type to read from
    /// ([`Client::with_cache`](super::Client::with_cache) adds one).
    #[error("the client has no informer of {kind}")]
    NoInformer {
        /// The type read (its Rust name).
        kind: &'static str,
    },
    /// An index lookup failed (no index of that name, say).
    #[error("index lookup: {0}")]
    Index(#[from] informer_store::Error),
    /// A namespaced object was written without a namespace (in its metadata, or as an
    /// argument).
    #[error("{kind} {name:?} is namespaced: a write needs its namespace")]
    NoNamespace {
        /// The kind written.
        kind: String,
        /// The object's name (empty: none, a generated one).
        name: String,
    },
    /// An object without `metadata.name` was replaced or applied.
    #[error("a {kind} without metadata.name cannot be replaced or applied")]
    NoName {
        /// The kind written.
        kind: String,
    },
    /// A server-side apply was refused with 409 Conflict: fields it sets are owned by other
    /// field managers ([`conflicting_fields`](Self::conflicting_fields) names them). See the
    /// type's docs for what an error policy should do with it.
    #[error("apply conflicts with other field managers: {}", .0.message)]
    ApplyConflict(Box<Status>),
    /// The server's answer to a write carried no resource version, and asking the server for
    /// its collection's version instead failed too: the key's next reconcile could not wait
    /// for this write. The write itself was made.
    #[error("the answer to a write of {kind} {name:?} carried no resource version to wait for")]
    NoResourceVersion {
        /// The kind written.
        kind: String,
        /// The object's name.
        name: String,
        /// Why the collection's version could not be had (`None`: its answer had none).
        #[source]
        source: Option<kube::Error>,
    },
    /// The API request failed (kube-client's error: the server's `Status`, or the
    /// connection's failure).
    #[error(transparent)]
    Api(#[from] kube::Error),
}

impl ClientError {
    /// Whether it is a server-side apply conflict.
    pub fn is_apply_conflict(&self) -> bool {
        matches!(self, Self::ApplyConflict(_))
    }

    /// For an [`ApplyConflict`](Self::ApplyConflict), the fields in conflict, as the server
    /// names them (`.spec.replicas`, ...); empty for any other error.
    pub fn conflicting_fields(&self) -> Vec<&str> {
        match self {
            Self::ApplyConflict(status) => status
                .details
                .iter()
                .flat_map(|d| &d.causes)
                .map(|cause| cause.field.as_str())
                .collect(),
            _ => Vec::new(),
        }
    }

    /// The API server's `Status` of a refused request, if that is what this is.
    pub fn status(&self) -> Option<&Status> {
        match self {
            Self::ApplyConflict(status) => Some(status),
            Self::Api(kube::Error::Api(status)) => Some(status),
            _ => None,
        }
    }

    /// The error of a server-side apply: a 409 Conflict naming field-manager conflicts
    /// (`FieldManagerConflict` causes) is an [`ApplyConflict`](Self::ApplyConflict). Any other
    /// 409 (an applied configuration carrying a stale `metadata.resourceVersion`: "the object
    /// has been modified") stays an [`Api`](Self::Api) error: transient, for a backoff.
    pub(super) fn of_apply(error: kube::Error) -> Self {
        match error {
            kube::Error::Api(status)
                if status.code == 409
                    && status.reason == "Conflict"
                    && status.details.as_ref().is_some_and(|d| {
                        d.causes.iter().any(|c| c.reason == "FieldManagerConflict")
                    }) =>
            {
                Self::ApplyConflict(status)
            }
            other => Self::Api(other),
        }
    }
}
