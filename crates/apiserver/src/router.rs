//! The HTTP front: a request's path routed to discovery or a resource, and the gates every
//! resource request passes before it is served (the request record, client isolation, the
//! verb, `?timeout=`, injected latency and failures, content negotiation).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{Method, header};
use axum::response::{IntoResponse, Response};

use crate::codec::{self, failure_response};
use crate::duration::parse_go_duration;
use crate::faults::{Failure, Verb};
use crate::handlers::{ResourceRequest, ResourceRoute, serve};
use crate::query::ListOptions;
use crate::state::{RecordedRequest, Shared};
use crate::status::StatusError;
use crate::storage::Storage;

/// The HTTP application: every request goes to [`handle`]; its response is compressed as
/// kube-apiserver compresses (with [`Config::response_compression`](crate::Config)), then sent
/// over the server's link (at its bandwidth limit, if any).
pub(crate) fn router(shared: &Arc<Shared>) -> axum::Router {
    let app = axum::Router::new()
        .fallback(handle)
        .with_state(shared.clone());
    let app = if shared.config.response_compression {
        app.layer(crate::compression::layer())
            .layer(axum::middleware::map_request(crate::compression::negotiate))
    } else {
        app
    };
    app.layer(axum::middleware::map_response_with_state(
        shared.link.clone(),
        crate::bandwidth::limit,
    ))
}

/// Where a path leads.
enum Route {
    Resource(ResourceRoute),
    Discovery(Response),
    NotFound,
}

/// Routes `path`: a discovery document (answered at once), a resource, or nothing.
fn route(shared: &Shared, path: &str) -> Route {
    let segments: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let storage = shared.storage.read();
    let (group, version, rest): (&str, &str, &[&str]) = match segments.as_slice() {
        ["version"] => return Route::Discovery(crate::discovery::version(&shared.config)),
        ["healthz" | "livez" | "readyz"] => {
            return Route::Discovery(
                Response::builder()
                    .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
                    .body(Body::from("ok"))
                    .unwrap_or_default(),
            );
        }
        ["api"] => return Route::Discovery(crate::discovery::core_versions(&storage)),
        ["apis"] => return Route::Discovery(crate::discovery::group_list(&storage)),
        ["apis", group] => {
            return crate::discovery::group(&storage, group)
                .map_or(Route::NotFound, Route::Discovery);
        }
        ["api", version] => {
            return crate::discovery::resource_list(&storage, "", version)
                .map_or(Route::NotFound, Route::Discovery);
        }
        ["apis", group, version] => {
            return crate::discovery::resource_list(&storage, group, version)
                .map_or(Route::NotFound, Route::Discovery);
        }
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return Route::NotFound,
    };
    let (watch_path, rest) = match rest {
        ["watch", rest @ ..] => (true, rest),
        _ => (false, rest),
    };
    locate(&storage, group, version, rest, watch_path).map_or(Route::NotFound, Route::Resource)
}

/// The resource, namespace, name and subresource the rest of a path names (after the group
/// version and `watch/`): a collection, an object, or an object's `/status` (the one
/// subresource served, on the types that have it; never watched).
fn locate(
    storage: &Storage,
    group: &str,
    version: &str,
    rest: &[&str],
    watch_path: bool,
) -> Option<ResourceRoute> {
    let lookup = |plural: &str| storage.lookup(group, version, plural);
    let namespaced = |r: usize| storage.resource(r).info.namespaced;
    let has_status = |r: usize| storage.resource(r).info.status_subresource && !watch_path;
    let (resource, namespace, name, status) = match rest {
        ["namespaces", ns, plural] => match lookup(plural) {
            Some(r) if namespaced(r) => Some((r, Some(*ns), None, false)),
            // `/api/v1/namespaces/{name}/status`: the namespace's own subresource.
            _ => lookup("namespaces")
                .filter(|&r| *plural == "status" && !namespaced(r) && has_status(r))
                .map(|r| (r, None, Some(*ns), true)),
        },
        ["namespaces", ns, plural, name] => lookup(plural)
            .filter(|&r| namespaced(r))
            .map(|r| (r, Some(*ns), Some(*name), false)),
        ["namespaces", ns, plural, name, "status"] => lookup(plural)
            .filter(|&r| namespaced(r) && has_status(r))
            .map(|r| (r, Some(*ns), Some(*name), true)),
        [plural] => lookup(plural).map(|r| (r, None, None, false)),
        [plural, name] => lookup(plural)
            .filter(|&r| !namespaced(r))
            .map(|r| (r, None, Some(*name), false)),
        [plural, name, "status"] => lookup(plural)
            .filter(|&r| !namespaced(r) && has_status(r))
            .map(|r| (r, None, Some(*name), true)),
        _ => None,
    }?;
    Some(ResourceRoute {
        resource,
        namespace: namespace.map(str::to_owned),
        name: name.map(str::to_owned),
        watch_path,
        status,
    })
}

/// Every request: routed, recorded, gated, then served.
async fn handle(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let path = parts.uri.path().to_owned();
    let query = parts.uri.query().unwrap_or("").to_owned();
    let route = route(&shared, &path);
    if let Route::Resource(_) = route
        && shared.recording.load(Ordering::SeqCst)
    {
        shared.recorded.lock().push(RecordedRequest {
            method: parts.method.as_str().to_owned(),
            path: path.clone(),
            query: query.clone(),
        });
    }
    // An isolated client is stopped before anything else, discovery included.
    let client = crate::isolation::client_of(&parts.headers);
    if let Some(client) = client.as_deref()
        && let Some(response) = shared.isolation_gate(client).await
    {
        return response;
    }
    let route = match route {
        Route::Discovery(response) => return response,
        Route::NotFound => return StatusError::unknown_path().into_response(),
        Route::Resource(route) => route,
    };
    let mut opts = match ListOptions::parse(&query) {
        Ok(opts) => opts,
        Err(status) => return status.into_response(),
    };
    opts.watch |= route.watch_path;
    let verb = match verb_of(&shared, &parts.method, &route, opts.watch) {
        Ok(verb) => verb,
        Err(status) => return status.into_response(),
    };
    // `WithRequestDeadline`: `?timeout=` bounds every request but watches.
    let deadline = if verb == Verb::Watch {
        None
    } else {
        match request_timeout(&query) {
            Ok(deadline) => deadline,
            Err(status) => return status.into_response(),
        }
    };
    let work = handle_resource(shared, parts, body, route, verb, opts, query);
    match deadline {
        Some(deadline) => tokio::time::timeout(deadline, work)
            .await
            .unwrap_or_else(|_| StatusError::request_timeout().into_response()),
        None => work.await,
    }
}

/// The verb of a request to `route` (`405` for a method the path does not serve).
fn verb_of(
    shared: &Shared,
    method: &Method,
    route: &ResourceRoute,
    watch: bool,
) -> Result<Verb, StatusError> {
    let named = route.name.is_some();
    let verb = match (method, named, watch) {
        // `/status`: get, update and patch only.
        (&Method::GET, _, false) if route.status => Some(Verb::Get),
        (&Method::PUT, _, _) if route.status => Some(Verb::Update),
        (&Method::PATCH, _, _) if route.status => Some(Verb::Patch),
        _ if route.status => None,
        (&Method::GET, _, true) => Some(Verb::Watch),
        (&Method::GET, false, false) => Some(Verb::List),
        (&Method::GET, true, false) => Some(Verb::Get),
        (&Method::POST, false, _) => Some(Verb::Create),
        (&Method::PUT, true, _) => Some(Verb::Update),
        (&Method::PATCH, true, _) => Some(Verb::Patch),
        (&Method::DELETE, true, _) => Some(Verb::Delete),
        // `deletecollection`: served on namespaced collections in a namespace, and on
        // cluster-scoped ones.
        (&Method::DELETE, false, _)
            if route.namespace.is_some()
                || !shared
                    .storage
                    .read()
                    .resource(route.resource)
                    .info
                    .namespaced =>
        {
            Some(Verb::Delete)
        }
        _ => None,
    };
    verb.ok_or_else(|| {
        let info = shared.storage.read().resource(route.resource).info.clone();
        StatusError::method_not_allowed(&info, method.as_str())
    })
}

/// The longest `?timeout=` honoured: kube-apiserver's `--request-timeout` default.
const REQUEST_TIMEOUT_MAXIMUM: Duration = Duration::from_secs(60);

/// The request deadline `?timeout=` sets: a Go duration; 0 (or more than the maximum) is the
/// maximum; absent is none (the simulator imposes no deadline of its own).
fn request_timeout(query: &str) -> Result<Option<Duration>, StatusError> {
    let Some((_, value)) = form_urlencoded::parse(query.as_bytes()).find(|(k, _)| k == "timeout")
    else {
        return Ok(None);
    };
    if value.is_empty() {
        return Ok(None);
    }
    let timeout = parse_go_duration(&value).map_err(|e| {
        StatusError::bad_request(format!(
            "invalid timeout specified in the request URL - {e}"
        ))
    })?;
    Ok(Some(
        if timeout.is_zero() || timeout > REQUEST_TIMEOUT_MAXIMUM {
            REQUEST_TIMEOUT_MAXIMUM
        } else {
            timeout
        },
    ))
}

/// A routed resource request past the isolation gate and its deadline: latency and failures
/// injected, body read, encoding negotiated, then served.
async fn handle_resource(
    shared: Arc<Shared>,
    parts: axum::http::request::Parts,
    body: Body,
    route: ResourceRoute,
    verb: Verb,
    opts: ListOptions,
    query: String,
) -> Response {
    let (latency, failure, unavailable) = {
        let mut faults = shared.faults.lock();
        (
            faults.latency,
            faults.take_failure(verb),
            faults.unavailable,
        )
    };
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    if let Some(failure) = failure {
        return failure_response(failure);
    }
    if let (Some(retry_after), Verb::List | Verb::Watch) = (unavailable, verb) {
        return failure_response(Failure::too_many_requests(retry_after));
    }
    let body = match axum::body::to_bytes(body, 64 * 1024 * 1024).await {
        Ok(b) => b,
        Err(e) => return StatusError::bad_request(e.to_string()).into_response(),
    };
    let content_type = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let accept = parts
        .headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let builtin = {
        let storage = shared.storage.read();
        let info = &storage.resource(route.resource).info;
        codec::serves(info)
    };
    let output = match codec::negotiate(accept, builtin) {
        Ok(output) => output,
        Err(status) => return status.into_response(),
    };
    let request = ResourceRequest {
        route,
        verb,
        opts,
        query: &query,
        content_type: &content_type,
        body,
        client: crate::isolation::client_of(&parts.headers),
        user_agent: parts
            .headers
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
        output,
    };
    match serve(&shared, request).await {
        Ok(response) => response,
        Err(status) => codec::status_response(status, output),
    }
}
