//! Serving a resource request once it is routed: each verb against the shared state (objects,
//! lists, watches), and the answers kube-apiserver's handlers give.

use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::Response;
use bytes::Bytes;
use serde_json::{Value, json};

use crate::apply::{Apply, WriteOptions, decode_config};
use crate::codec::{self, json_response, parse_body};
use crate::deletion::{DeleteOptions, Deleted};
use crate::faults::Verb;
use crate::objects::{Target, Write};
use crate::patch::{APPLY_PATCH, Patch};
use crate::query::ListOptions;
use crate::resource::ResourceInfo;
use crate::state::Shared;
use crate::status::StatusError;
use crate::storage::StoredObject;

/// A resource request, once the path is understood.
pub(crate) struct ResourceRoute {
    pub(crate) resource: usize,
    pub(crate) namespace: Option<String>,
    pub(crate) name: Option<String>,
    /// Whether the path was a `/watch/` one (the deprecated watch paths).
    pub(crate) watch_path: bool,
    /// Whether the path is the object's `/status` subresource.
    pub(crate) status: bool,
}

/// A resource request, read and routed, ready to be served.
pub(crate) struct ResourceRequest<'a> {
    pub(crate) route: ResourceRoute,
    pub(crate) verb: Verb,
    pub(crate) opts: ListOptions,
    pub(crate) query: &'a str,
    pub(crate) content_type: &'a str,
    pub(crate) body: Bytes,
    /// Who sent it (see [`crate::isolation::client_of`]).
    pub(crate) client: Option<String>,
    /// The `User-Agent` header, whose first token names the field manager of a write that
    /// names none.
    pub(crate) user_agent: Option<String>,
    /// The negotiated response encoding.
    pub(crate) output: codec::Output,
}

/// Serves a routed resource request by its verb; an error is the `Status` to answer with.
pub(crate) async fn serve(
    shared: &Arc<Shared>,
    request: ResourceRequest<'_>,
) -> Result<Response, StatusError> {
    let ResourceRequest {
        route,
        verb,
        mut opts,
        query,
        content_type,
        body,
        client,
        user_agent,
        output,
    } = request;
    // Routed just before the resource was unregistered: answered as if routed after.
    shared.storage.read().check_served(route.resource)?;
    let media = content_type.split(';').next().unwrap_or("").trim();
    let reply = Reply {
        shared,
        resource: route.resource,
        output,
    };
    let target = Target {
        resource: route.resource,
        namespace: route.namespace.as_deref(),
    };
    let name = route.name.as_deref().unwrap_or_default();
    // Who writes, for creates and replaces (patches read their own options).
    let manager = WriteOptions::parse(query).manager(user_agent.as_deref());
    let write = Write::by(manager, route.status);
    match verb {
        Verb::List => {
            opts.decode_shard_selector(shared.config.shard_selector)?;
            opts.validate()?;
            let body = shared
                .list(route.resource, route.namespace.as_deref(), &opts, output)
                .await?;
            Ok(codec::list_response(body, output))
        }
        Verb::Watch => watch(shared, &route, opts, client, output),
        Verb::Get => Ok(reply.object(&*shared.get(target, name)?, StatusCode::OK)),
        Verb::Create => {
            if route.namespace.is_none() && reply.info().namespaced {
                return Err(StatusError::unknown_path());
            }
            let stored = shared.create_as(target, reply.read_object(media, &body)?, &write)?;
            Ok(reply.object(&stored, StatusCode::CREATED))
        }
        Verb::Update => {
            let replaced =
                shared.update_as(target, name, reply.read_object(media, &body)?, &write)?;
            Ok(reply.object(&replaced.object, created_or_ok(replaced.created)))
        }
        Verb::Patch => {
            let request = PatchRequest {
                target,
                name,
                media,
                body: &body,
                query,
                user_agent: user_agent.as_deref(),
                status: route.status,
            };
            patch(shared, &reply, request)
        }
        Verb::Delete if route.name.is_none() => {
            opts.decode_shard_selector(shared.config.shard_selector)?;
            opts.validate()?;
            let options = delete_options(query, &body)?;
            delete_collection(shared, target, &opts, &options).await
        }
        Verb::Delete => {
            let options = delete_options(query, &body)?;
            Ok(reply.deleted(shared.delete(target, name, &options)?))
        }
        Verb::Any => Err(StatusError::unknown_path()),
    }
}

/// A `PATCH`: its type accepted (`415` otherwise), its options checked, then a server-side
/// apply or a patch of the stored object.
struct PatchRequest<'a> {
    target: Target<'a>,
    name: &'a str,
    media: &'a str,
    body: &'a [u8],
    query: &'a str,
    user_agent: Option<&'a str>,
    /// To the `/status` subresource.
    status: bool,
}

fn patch(
    shared: &Shared,
    reply: &Reply<'_>,
    request: PatchRequest<'_>,
) -> Result<Response, StatusError> {
    let info = reply.info();
    crate::patch::check_media_type(&info, request.media)?;
    let options = WriteOptions::parse(request.query);
    let apply = request.media == APPLY_PATCH;
    options.check_patch(apply)?;
    if apply {
        let config = decode_config(request.body)?;
        let apply = Apply {
            config: &config,
            manager: options.field_manager.as_deref().unwrap_or_default(),
            force: options.force == Some(true),
            status: request.status,
        };
        let (stored, created) = shared.apply(request.target, request.name, apply)?;
        return Ok(reply.object(&stored, created_or_ok(created)));
    }
    let patch = Patch::decode(&info, request.media, request.body)?;
    let write = Write::by(options.manager(request.user_agent), request.status);
    let stored = shared.patch_as(request.target, request.name, &patch, &write)?;
    Ok(reply.object(&stored, StatusCode::OK))
}

/// `201 Created` for a write that created its object, else `200 OK`.
fn created_or_ok(created: bool) -> StatusCode {
    if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    }
}

/// A watch: of the collection, or of one object by name.
fn watch(
    shared: &Arc<Shared>,
    route: &ResourceRoute,
    mut opts: ListOptions,
    client: Option<String>,
    output: codec::Output,
) -> Result<Response, StatusError> {
    opts.decode_shard_selector(shared.config.shard_selector)?;
    if let Some(name) = route.name.as_deref() {
        select_name(&mut opts, name)?;
    }
    opts.validate()?;
    shared.watch(
        route.resource,
        route.namespace.as_deref(),
        &opts,
        client,
        output,
    )
}

/// A named watch is a watch of the collection restricted to that name: `metadata.name=<name>`
/// joins the field selector, which may pin no other name (400).
fn select_name(opts: &mut ListOptions, name: &str) -> Result<(), StatusError> {
    let selector = format!("metadata.name={name}");
    match FieldName::of(&opts.field_selector) {
        Some(other) if other != name => {
            return Err(StatusError::bad_request(format!(
                "fieldSelector metadata.name={other} conflicts with the name in the path ({name})"
            )));
        }
        _ => {}
    }
    opts.field_selector = if opts.field_selector.is_empty() {
        selector
    } else {
        format!("{},{selector}", opts.field_selector)
    };
    Ok(())
}

/// How a handler reads and answers objects of the request's resource.
struct Reply<'a> {
    shared: &'a Shared,
    resource: usize,
    /// The negotiated response encoding.
    output: codec::Output,
}

impl Reply<'_> {
    /// The resource, as registered.
    fn info(&self) -> Arc<ResourceInfo> {
        self.shared
            .storage
            .read()
            .resource(self.resource)
            .info
            .clone()
    }

    /// The object of a create or update body, in its `media` type (secrets' `stringData`
    /// folded into `data`).
    fn read_object(&self, media: &str, body: &[u8]) -> Result<Value, StatusError> {
        let info = self.info();
        let mut value = codec::read_body(&info, media, body)?;
        crate::strategy::prepare_secret(&info, &mut value)?;
        Ok(value)
    }

    /// A stored object, with its `kind` and `apiVersion`, as the response.
    fn object(&self, stored: &StoredObject, code: StatusCode) -> Response {
        let storage = self.shared.storage.read();
        let mut out = Vec::with_capacity(stored.body.len() + 64);
        storage
            .resource(self.resource)
            .write_typed(&mut out, stored);
        codec::body_response(code, out, self.output)
    }

    /// The answer to a delete: the object while it is still stored (graceful deletion,
    /// finalizers); once removed, the object or a `Status`, as the registry answers.
    fn deleted(&self, deleted: Deleted) -> Response {
        match deleted {
            Deleted::Terminating(stored) => self.object(&stored, StatusCode::OK),
            Deleted::Removed(stored) => {
                let storage = self.shared.storage.read();
                let info = &storage.resource(self.resource).info;
                if returns_deleted_object(info) {
                    drop(storage);
                    self.object(&stored, StatusCode::OK)
                } else {
                    codec::body_response(
                        StatusCode::OK,
                        delete_success(info, &stored).to_string().into_bytes(),
                        self.output,
                    )
                }
            }
        }
    }
}

/// The `DeleteOptions` of a request: the body (JSON, may be empty) and the
/// `gracePeriodSeconds` query parameter (which wins, as the handler decodes the query last).
fn delete_options(query: &str, body: &[u8]) -> Result<DeleteOptions, StatusError> {
    let options: Value = if body.is_empty() {
        json!({})
    } else {
        parse_body(body)?
    };
    let text = |pointer: &str| {
        options
            .pointer(pointer)
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let mut grace_period_seconds = options.get("gracePeriodSeconds").and_then(Value::as_i64);
    for (k, v) in form_urlencoded::parse(query.as_bytes()) {
        if k == "gracePeriodSeconds" {
            grace_period_seconds = Some(v.trim().parse::<i64>().map_err(|_| {
                StatusError::bad_request(format!(
                    "invalid value {v:?} for query parameter gracePeriodSeconds: strconv.ParseInt: parsing {v:?}: invalid syntax"
                ))
            })?);
        }
    }
    Ok(DeleteOptions {
        resource_version: text("/preconditions/resourceVersion"),
        uid: text("/preconditions/uid"),
        grace_period_seconds,
        immediate: false,
    })
}

/// `DELETE` on a collection (`Store.DeleteCollection`): lists what the selectors (and
/// `limit`) select, deletes each (with the request's `DeleteOptions`: pods gracefully,
/// finalizers respected; one already gone is skipped), and answers with that list.
async fn delete_collection(
    shared: &Arc<Shared>,
    collection: Target<'_>,
    opts: &ListOptions,
    options: &DeleteOptions,
) -> Result<Response, StatusError> {
    let (resource, namespace) = (collection.resource, collection.namespace);
    let listed = shared
        .list(resource, namespace, opts, codec::Output::Json)
        .await?
        .json()
        .ok_or_else(|| StatusError::internal("a JSON list came back in protobuf"))?;
    let list: Value =
        serde_json::from_slice(&listed).map_err(|e| StatusError::internal(&e.to_string()))?;
    for item in list["items"].as_array().into_iter().flatten() {
        let name = item
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        let ns = item.pointer("/metadata/namespace").and_then(Value::as_str);
        let target = Target {
            resource,
            namespace: ns.or(namespace),
        };
        match shared.delete(target, name, options) {
            Ok(_) => {}
            Err(e) if e.code() == 404 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(json_response(StatusCode::OK, listed))
}

/// Registries with `ReturnDeletedObject: true` answer a delete with the object; the others
/// with a `Status`.
fn returns_deleted_object(info: &ResourceInfo) -> bool {
    match info.group.as_str() {
        "" => matches!(info.plural.as_str(), "pods" | "serviceaccounts"),
        "storage.k8s.io" => info.plural == "storageclasses",
        _ => false,
    }
}

/// `Store.finalizeDelete`'s answer: `status: Success`, no `code`, and `details.kind` set to
/// the resource (not the kind).
fn delete_success(info: &ResourceInfo, stored: &StoredObject) -> Value {
    let mut details = serde_json::Map::new();
    if let Some(name) = stored.value.pointer("/metadata/name") {
        details.insert("name".into(), name.clone());
    }
    if !info.group.is_empty() {
        details.insert("group".into(), Value::String(info.group.clone()));
    }
    details.insert("kind".into(), Value::String(info.plural.clone()));
    if let Some(uid) = stored.value.pointer("/metadata/uid") {
        details.insert("uid".into(), uid.clone());
    }
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": details,
    })
}

/// The `metadata.name` a field selector pins, if any.
struct FieldName;

impl FieldName {
    fn of(selector: &str) -> Option<&str> {
        selector.split(',').find_map(|term| {
            let term = term.trim();
            term.strip_prefix("metadata.name==")
                .or_else(|| term.strip_prefix("metadata.name="))
        })
    }
}
