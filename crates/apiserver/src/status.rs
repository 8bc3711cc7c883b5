//! `metav1.Status` errors, built the way kube-apiserver builds them.
//!
//! Each constructor mirrors one of apimachinery's `k8s.io/apimachinery/pkg/api/errors`
//! constructors (or a storage-layer error built on them), so that the code, `reason`, `message`
//! and `details` a client sees are the ones a real v1.36 server sends for the same request.

use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    ListMeta, Status, StatusCause, StatusDetails,
};

pub use crate::field_error::{DeletePrecondition, FieldError, FieldErrorKind};
use crate::resource::ResourceInfo;

/// A failed request: the `Status` object the server sends, and its HTTP code.
///
/// The same value is returned by the Rust handle's write methods and sent over HTTP, so a test
/// can assert on either side.
#[derive(Clone, Debug, PartialEq)]
pub struct StatusError {
    status: Box<Status>,
}

impl StatusError {
    fn new(code: u16, reason: &str, message: impl Into<String>) -> Self {
        StatusError {
            status: Box::new(Status {
                code: Some(i32::from(code)),
                message: Some(message.into()),
                metadata: ListMeta::default(),
                reason: Some(reason.to_owned()),
                status: Some("Failure".to_owned()),
                details: None,
            }),
        }
    }

    fn with_details(mut self, details: StatusDetails) -> Self {
        self.status.details = Some(details);
        self
    }

    /// The HTTP status code (`Status.code`).
    pub fn code(&self) -> u16 {
        self.status
            .code
            .and_then(|c| u16::try_from(c).ok())
            .unwrap_or(500)
    }

    /// The machine-readable reason (`Status.reason`), e.g. `"Expired"`.
    pub fn reason(&self) -> &str {
        self.status.reason.as_deref().unwrap_or("")
    }

    /// The human-readable message (`Status.message`).
    pub fn message(&self) -> &str {
        self.status.message.as_deref().unwrap_or("")
    }

    /// `details.retryAfterSeconds`, when set and positive.
    pub fn retry_after_seconds(&self) -> Option<u32> {
        self.status
            .details
            .as_ref()
            .and_then(|d| d.retry_after_seconds)
            .and_then(|s| u32::try_from(s).ok())
            .filter(|s| *s > 0)
    }

    /// The `Status` object itself.
    pub fn status(&self) -> &Status {
        &self.status
    }

    /// The `Status` as JSON, exactly as it goes on the wire (`kind` and `apiVersion` included).
    pub fn to_json(&self) -> serde_json::Value {
        let mut value = serde_json::to_value(&*self.status).unwrap_or_default();
        if let Some(obj) = value.as_object_mut() {
            obj.insert("kind".into(), "Status".into());
            obj.insert("apiVersion".into(), "v1".into());
        }
        value
    }

    /// A status with any code, reason and message (for fault injection).
    pub fn custom(code: u16, reason: &str, message: impl Into<String>) -> Self {
        Self::new(code, reason, message)
    }

    /// Sets `details.retryAfterSeconds` (which also makes the HTTP response carry `Retry-After`).
    pub fn with_retry_after(mut self, seconds: u32) -> Self {
        let details = self
            .status
            .details
            .get_or_insert_with(StatusDetails::default);
        details.retry_after_seconds = Some(i32::try_from(seconds).unwrap_or(i32::MAX));
        self
    }

    /// 404 `NotFound` for an object: `pods "web-0" not found`.
    pub fn not_found(resource: &ResourceInfo, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", resource.group_resource()),
        )
        .with_details(resource.details(name))
    }

    /// 404 `NotFound` for a path the server does not serve.
    pub fn unknown_path() -> Self {
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
        .with_details(StatusDetails::default())
    }

    /// 409 `AlreadyExists`: `pods "web-0" already exists`.
    pub fn already_exists(resource: &ResourceInfo, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", resource.group_resource()),
        )
        .with_details(resource.details(name))
    }

    /// 409 `Conflict`: `Operation cannot be fulfilled on pods "web-0": <why>`.
    pub fn conflict(resource: &ResourceInfo, name: &str, why: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {why}",
                resource.group_resource()
            ),
        )
        .with_details(resource.details(name))
    }

    /// The conflict a delete gets when one of its preconditions (`uid`, `resourceVersion`) is
    /// not the stored object's, as `rest.BeforeDelete` words it: `NewConflict` is given the
    /// *kind* as the resource, so the message says `ConfigMap "x"` (`Lease.coordination.k8s.io
    /// "x"` in a named group) and `details.kind` is the kind.
    pub fn delete_precondition_failed(
        resource: &ResourceInfo,
        name: &str,
        field: DeletePrecondition,
        requested: &str,
        stored: &str,
    ) -> Self {
        let qualified = if resource.group.is_empty() {
            resource.kind.clone()
        } else {
            format!("{}.{}", resource.kind, resource.group)
        };
        let why = match field {
            DeletePrecondition::Uid => format!(
                "the UID in the precondition ({requested}) does not match the UID in record ({stored}). The object might have been deleted and then recreated"
            ),
            DeletePrecondition::ResourceVersion => format!(
                "the ResourceVersion in the precondition ({requested}) does not match the ResourceVersion in record ({stored}). The object might have been modified"
            ),
        };
        Self::new(
            409,
            "Conflict",
            format!("Operation cannot be fulfilled on {qualified} \"{name}\": {why}"),
        )
        .with_details(StatusDetails {
            group: Some(resource.group.clone()).filter(|g| !g.is_empty()),
            kind: Some(resource.kind.clone()),
            name: Some(name.to_owned()),
            ..StatusDetails::default()
        })
    }

    /// The conflict a write gets when its `uid` precondition (a `PUT`'s `metadata.uid`) names
    /// another object than the one stored under the name.
    pub fn uid_precondition_failed(
        resource: &ResourceInfo,
        name: &str,
        uid: &str,
        stored: &str,
    ) -> Self {
        Self::conflict(
            resource,
            name,
            &format!(
                "Precondition failed: UID in precondition: {uid}, UID in object meta: {stored}"
            ),
        )
    }

    /// 409 `Conflict` of a server-side apply that would change fields other managers own
    /// (`NewApplyConflict`): the message names them, and `details` holds only the causes, one
    /// `FieldManagerConflict` per field (`message`, `field`).
    pub(crate) fn apply_conflict(message: String, causes: Vec<(String, String)>) -> Self {
        Self::new(409, "Conflict", message).with_details(StatusDetails {
            causes: Some(
                causes
                    .into_iter()
                    .map(|(message, field)| StatusCause {
                        reason: Some("FieldManagerConflict".into()),
                        message: Some(message),
                        field: Some(field),
                    })
                    .collect(),
            ),
            ..StatusDetails::default()
        })
    }

    /// An error kube-apiserver answers as it is, because no layer turned it into a `Status`:
    /// the code (`500`) and the message, without a reason or details.
    pub(crate) fn unclassified(code: u16, message: impl Into<String>) -> Self {
        let mut status = Self::new(code, "", message);
        status.status.reason = None;
        status
    }

    /// 422 `Invalid` for request options (`PatchOptions.meta.k8s.io "" is invalid: ...`), as
    /// the handlers validate `metav1` options.
    pub(crate) fn invalid_options(kind: &str, errors: Vec<FieldError>) -> Self {
        Self::invalid(
            &format!("{kind}.meta.k8s.io"),
            "meta.k8s.io",
            kind,
            "",
            errors,
        )
    }

    /// The conflict an update with a stale `metadata.resourceVersion` gets.
    pub fn stale_update(resource: &ResourceInfo, name: &str) -> Self {
        Self::conflict(
            resource,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 422 `Invalid` for a `PUT` without `metadata.resourceVersion` to a type whose strategy
    /// refuses unconditional updates (leases, for one): `leases.coordination.k8s.io "x" is
    /// invalid: metadata.resourceVersion: Invalid value: 0x0: must be specified for an update`.
    /// The generic store qualifies it with the *resource*, in the message and in
    /// `details.kind`.
    pub fn resource_version_required(resource: &ResourceInfo, name: &str) -> Self {
        Self::invalid(
            &resource.group_resource(),
            &resource.group,
            &resource.plural,
            name,
            vec![FieldError::invalid_non_string(
                "metadata.resourceVersion",
                "0x0",
                "must be specified for an update",
            )],
        )
    }

    /// 400 `BadRequest` with the given message.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// 410 `Expired` with the given message.
    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    /// 410 `Gone` (the reason servers before 1.18 used for too-old resource versions).
    pub fn gone(message: impl Into<String>) -> Self {
        Self::new(410, "Gone", message)
    }

    /// 410 `Expired` for an `Exact` list below the compaction floor.
    pub fn list_too_old() -> Self {
        Self::expired("The resourceVersion for the provided list is too old.")
    }

    /// 410 `Expired` for a watch below the history floor, as the watch cache words it.
    pub fn watch_too_old(requested: &str, floor: &str) -> Self {
        Self::expired(format!("too old resource version: {requested} ({floor})"))
    }

    /// 410 `Expired` for a continue token whose snapshot was compacted. With `inconsistent`,
    /// the status carries the token that resumes from the current state.
    pub fn continue_expired(inconsistent: Option<String>) -> Self {
        match inconsistent {
            Some(token) => {
                let mut err = Self::expired(
                    "The provided continue parameter is too old to display a consistent list \
                     result. You can start a new list without the continue parameter, or use \
                     the continue token in this response to retrieve the remainder of the \
                     results. Continuing with the provided token results in an inconsistent \
                     list - objects that were created, modified, or deleted between the time \
                     the first chunk was returned and now may show up in the list.",
                );
                err.status.metadata = ListMeta {
                    continue_: Some(token),
                    ..ListMeta::default()
                };
                err
            }
            None => Self::expired(
                "The provided continue parameter is too old to display a consistent list \
                 result. You can start a new list without the continue parameter.",
            ),
        }
    }

    /// 504 `Timeout` with cause `ResourceVersionTooLarge` and `retryAfterSeconds: 1`: the
    /// requested resource version is ahead of the server.
    pub fn too_large_resource_version(requested: &str, current: &str) -> Self {
        Self::new(
            504,
            "Timeout",
            format!("Timeout: Too large resource version: {requested}, current: {current}"),
        )
        .with_details(StatusDetails {
            causes: Some(vec![StatusCause {
                reason: Some("ResourceVersionTooLarge".into()),
                message: Some("Too large resource version".into()),
                field: None,
            }]),
            retry_after_seconds: Some(1),
            ..StatusDetails::default()
        })
    }

    /// 429 `TooManyRequests` with `retryAfterSeconds`.
    pub fn too_many_requests(message: impl Into<String>, retry_after: u32) -> Self {
        Self::new(429, "TooManyRequests", message)
            .with_details(StatusDetails::default())
            .with_retry_after(retry_after)
    }

    /// 500 `InternalError`: `Internal error occurred: <err>`.
    pub fn internal(err: &str) -> Self {
        Self::new(
            500,
            "InternalError",
            format!("Internal error occurred: {err}"),
        )
        .with_details(StatusDetails {
            causes: Some(vec![StatusCause {
                message: Some(err.to_owned()),
                ..StatusCause::default()
            }]),
            ..StatusDetails::default()
        })
    }

    /// 405 `MethodNotAllowed`.
    pub fn method_not_allowed(resource: &ResourceInfo, action: &str) -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            format!(
                "{action} is not supported on resources of kind \"{}\"",
                resource.group_resource()
            ),
        )
        .with_details(StatusDetails {
            group: Some(resource.group.clone()).filter(|g| !g.is_empty()),
            kind: Some(resource.plural.clone()),
            ..StatusDetails::default()
        })
    }

    /// 415 `UnsupportedMediaType` for a patch type the server does not apply, listing the
    /// `accepted` ones (`negotiation.NewUnsupportedMediaTypeError`: no details).
    pub fn unsupported_media_type(accepted: &[&str]) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: {}",
                accepted.join(", ")
            ),
        )
    }

    /// 406 `NotAcceptable` when no media type of the `Accept` header can be served
    /// (`negotiation.NewNotAcceptableError`).
    pub fn not_acceptable(accepted: &[&str]) -> Self {
        Self::new(
            406,
            "NotAcceptable",
            format!(
                "only the following media types are accepted: {}",
                accepted.join(", ")
            ),
        )
    }

    /// 504 `Timeout` from the request deadline (`?timeout=`, or the server's maximum).
    pub fn request_timeout() -> Self {
        Self::new(
            504,
            "Timeout",
            "Timeout: request did not complete within requested timeout - context deadline exceeded",
        )
        .with_details(StatusDetails::default())
    }

    /// Sets `details: {}`.
    pub(crate) fn with_empty_details(self) -> Self {
        self.with_details(StatusDetails::default())
    }

    /// 422 `Invalid` for an object (`Pod "web-0" is invalid: ...`).
    pub fn invalid_object(resource: &ResourceInfo, name: &str, errors: Vec<FieldError>) -> Self {
        let qualified = if resource.group.is_empty() {
            resource.kind.clone()
        } else {
            format!("{}.{}", resource.kind, resource.group)
        };
        Self::invalid(&qualified, &resource.group, &resource.kind, name, errors)
    }

    /// 422 `Invalid` for list/watch options (`ListOptions.meta.k8s.io "" is invalid: ...`).
    pub fn invalid_list_options(errors: Vec<FieldError>) -> Self {
        Self::invalid(
            "ListOptions.meta.k8s.io",
            "meta.k8s.io",
            "ListOptions",
            "",
            errors,
        )
    }

    fn invalid(
        qualified_kind: &str,
        group: &str,
        kind: &str,
        name: &str,
        errors: Vec<FieldError>,
    ) -> Self {
        let aggregate = match errors.as_slice() {
            [one] => one.to_string(),
            many => format!(
                "[{}]",
                many.iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        let causes = errors
            .iter()
            .map(|e| StatusCause {
                reason: Some(e.kind.cause_type().to_owned()),
                message: Some(e.body()),
                field: Some(e.field.clone()),
            })
            .collect();
        Self::new(
            422,
            "Invalid",
            format!("{qualified_kind} \"{name}\" is invalid: {aggregate}"),
        )
        .with_details(StatusDetails {
            group: Some(group.to_owned()).filter(|g| !g.is_empty()),
            kind: Some(kind.to_owned()),
            name: Some(name.to_owned()).filter(|n| !n.is_empty()),
            causes: Some(causes),
            ..StatusDetails::default()
        })
    }
}

impl fmt::Display for StatusError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}): {}", self.code(), self.reason(), self.message())
    }
}

impl std::error::Error for StatusError {}
