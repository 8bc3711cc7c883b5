//! The adapter against canned HTTP responses: the requests it makes, and how kube-client's
//! answers (errors, watch lines good and bad) reach the reflector.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::{StreamExt, stream};
use http::{Request, Response};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, StreamBody};
use informer_kube::{KubeListerWatcher, MetadataListerWatcher, key_func, namespace_index_func};
use informer_reflector::{
    Error, ErrorKind, ListParams, ListSink, ListerWatcher, ResourceVersionMatch, WatchEvent,
    WatchParams,
};
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::client::Body;
use kube::core::PartialObjectMeta;
use parking_lot::Mutex;

type TestBody = BoxBody<Bytes, io::Error>;

/// A canned response: a status and a body, the body possibly cut by a transport error.
struct Canned {
    status: u16,
    chunks: Vec<Result<Bytes, io::ErrorKind>>,
}

fn json(status: u16, body: &str) -> Canned {
    Canned {
        status,
        chunks: vec![Ok(Bytes::from(body.to_owned()))],
    }
}

fn chunks(chunks: Vec<Result<&str, io::ErrorKind>>) -> Canned {
    Canned {
        status: 200,
        chunks: chunks
            .into_iter()
            .map(|c| c.map(|text| Bytes::from(text.to_owned())))
            .collect(),
    }
}

/// A kube client whose every request is answered from `responses`, in order; the request URIs
/// and Accept headers are recorded.
struct MockServer {
    requests: Arc<Mutex<Vec<(String, String)>>>,
    client: kube::Client,
}

impl MockServer {
    fn new(responses: Vec<Canned>) -> Self {
        let queue = Arc::new(Mutex::new(VecDeque::from(responses)));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = requests.clone();
        let service = tower::service_fn(move |req: Request<Body>| {
            let accept = req
                .headers()
                .get(http::header::ACCEPT)
                .map(|v| v.to_str().unwrap().to_owned())
                .unwrap_or_default();
            seen.lock().push((req.uri().to_string(), accept));
            let canned = queue.lock().pop_front().expect("an unexpected request");
            async move {
                let frames = canned.chunks.into_iter().map(|c| match c {
                    Ok(bytes) => Ok(http_body::Frame::data(bytes)),
                    Err(kind) => Err(io::Error::new(kind, "injected")),
                });
                let body: TestBody = BodyExt::boxed(StreamBody::new(stream::iter(frames)));
                Ok::<_, Infallible>(
                    Response::builder()
                        .status(canned.status)
                        .header("content-type", "application/json")
                        .body(body)
                        .unwrap(),
                )
            }
        });
        Self {
            requests,
            client: kube::Client::new(service, "default"),
        }
    }

    fn uris(&self) -> Vec<String> {
        self.requests
            .lock()
            .iter()
            .map(|(u, _)| u.clone())
            .collect()
    }
}

fn pod_json(name: &str, rv: &str) -> String {
    format!(
        r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{name}","namespace":"demo","resourceVersion":"{rv}"}},"spec":{{"containers":[{{"name":"c","image":"nginx"}}]}}}}"#
    )
}

fn line(kind: &str, object: &str) -> String {
    format!("{{\"type\":\"{kind}\",\"object\":{object}}}\n")
}

const EXPIRED: &str = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 1000 (4500)","reason":"Expired","code":410}"#;

fn query(uri: &str) -> Vec<String> {
    let mut q: Vec<String> = uri
        .split_once('?')
        .map(|(_, q)| {
            q.split('&')
                .filter(|p| !p.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    q.sort();
    q
}

#[tokio::test]
async fn list_requests_carry_the_reflectors_parameters() {
    let list = |rv: &str| {
        json(
            200,
            &format!(
                r#"{{"kind":"PodList","apiVersion":"v1","metadata":{{"resourceVersion":"{rv}","continue":"tok"}},"items":[{}]}}"#,
                pod_json("a", "3")
            ),
        )
    };
    let server = MockServer::new(vec![list("10"), list("11"), list("12"), list("13")]);
    let lw = KubeListerWatcher::new(Api::<Pod>::namespaced(server.client.clone(), "demo"))
        .labels("app=web");

    // The first list at "0" with a limit: both are sent (kube-client alone would drop RV=0).
    let page = lw
        .list(&ListParams {
            limit: Some(500),
            resource_version: "0".into(),
            ..ListParams::default()
        })
        .await
        .unwrap();
    assert_eq!(page.resource_version, "10");
    assert_eq!(page.continue_token.as_deref(), Some("tok"));
    assert_eq!(page.items.len(), 1);
    assert_eq!(page.items[0].metadata.name.as_deref(), Some("a"));

    // A relist at a version, with the reflector's own selector joined to ours.
    lw.list(&ListParams {
        resource_version: "42".into(),
        resource_version_match: Some(ResourceVersionMatch::NotOlderThan),
        label_selector: Some("tier=db".into()),
        ..ListParams::default()
    })
    .await
    .unwrap();
    // A consistent, paginated list.
    lw.list(&ListParams {
        limit: Some(500),
        ..ListParams::default()
    })
    .await
    .unwrap();
    // A continuation page: no resource version.
    lw.list(&ListParams {
        limit: Some(500),
        continue_token: Some("tok".into()),
        ..ListParams::default()
    })
    .await
    .unwrap();

    let uris = server.uris();
    assert!(
        uris.iter()
            .all(|u| u.starts_with("/api/v1/namespaces/demo/pods?")),
        "{uris:?}"
    );
    assert_eq!(
        query(&uris[0]),
        ["labelSelector=app%3Dweb", "limit=500", "resourceVersion=0"]
    );
    assert_eq!(
        query(&uris[1]),
        [
            "labelSelector=app%3Dweb%2Ctier%3Ddb",
            "resourceVersion=42",
            "resourceVersionMatch=NotOlderThan"
        ]
    );
    assert_eq!(query(&uris[2]), ["labelSelector=app%3Dweb", "limit=500"]);
    assert_eq!(
        query(&uris[3]),
        ["continue=tok", "labelSelector=app%3Dweb", "limit=500"]
    );
}

#[tokio::test]
async fn list_failures_are_classified() {
    let too_large = r#"{"metadata":{},"status":"Failure","message":"Timeout: Too large resource version: 9000, current: 5021","reason":"Timeout","details":{"causes":[{"reason":"ResourceVersionTooLarge","message":"Too large resource version"}],"retryAfterSeconds":1},"code":504}"#;
    let throttled = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"storage is (re)initializing","reason":"TooManyRequests","details":{"retryAfterSeconds":3},"code":429}"#;
    let server = MockServer::new(vec![
        json(410, EXPIRED),
        json(504, too_large),
        json(429, throttled),
        json(429, "Too many requests, please try again later."),
        json(
            200,
            r#"{"kind":"PodList","apiVersion":"v1","metadata":{},"items":[]}"#,
        ),
        json(200, "this is not json"),
        json(
            500,
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Internal error occurred: boom","reason":"InternalError","code":500}"#,
        ),
    ]);
    let lw = KubeListerWatcher::new(Api::<Pod>::all(server.client.clone()));
    let mut kinds = Vec::new();
    for _ in 0..7 {
        let err = lw.list(&ListParams::default()).await.unwrap_err();
        kinds.push((err.kind(), matches!(err, Error::Decode { .. })));
    }
    assert_eq!(
        kinds,
        [
            (ErrorKind::Expired, false),
            (ErrorKind::TooLargeResourceVersion, false),
            (
                ErrorKind::TooManyRequests {
                    retry_after: Some(Duration::from_secs(3))
                },
                false
            ),
            (ErrorKind::TooManyRequests { retry_after: None }, false),
            // A list without a resourceVersion.
            (ErrorKind::InternalError, true),
            (ErrorKind::InternalError, true),
            (ErrorKind::InternalError, false),
        ]
    );
    assert!(server.uris()[0].starts_with("/api/v1/pods"));
}

#[tokio::test]
async fn watch_requests_carry_version_timeout_bookmarks_and_streaming_flags() {
    let server = MockServer::new(vec![chunks(vec![]), chunks(vec![])]);
    let lw =
        KubeListerWatcher::new(Api::<Pod>::all(server.client.clone())).fields("spec.nodeName=n1");
    let mut s = lw
        .watch(&WatchParams {
            resource_version: "10".into(),
            timeout: Some(Duration::from_secs(417)),
            allow_bookmarks: true,
            ..WatchParams::default()
        })
        .await
        .unwrap();
    assert!(s.next().await.is_none());
    let mut s = lw
        .watch(&WatchParams {
            resource_version: String::new(),
            resource_version_match: Some(ResourceVersionMatch::NotOlderThan),
            timeout: Some(Duration::from_secs(300)),
            allow_bookmarks: true,
            send_initial_events: true,
            ..WatchParams::default()
        })
        .await
        .unwrap();
    assert!(s.next().await.is_none());
    let uris = server.uris();
    assert_eq!(
        query(&uris[0]),
        [
            "allowWatchBookmarks=true",
            "fieldSelector=spec.nodeName%3Dn1",
            "resourceVersion=10",
            "timeoutSeconds=417",
            "watch=true"
        ]
    );
    assert_eq!(
        query(&uris[1]),
        [
            "allowWatchBookmarks=true",
            "fieldSelector=spec.nodeName%3Dn1",
            "resourceVersion=",
            "resourceVersionMatch=NotOlderThan",
            "sendInitialEvents=true",
            "timeoutSeconds=300",
            "watch=true"
        ]
    );
}

/// The events of one watch whose body is `body`, as `(type, resource version)` or an error kind.
async fn watch_outcome(body: Vec<Result<&str, io::ErrorKind>>) -> Vec<String> {
    watch_outcome_of(chunks(body)).await
}

async fn watch_outcome_of(body: Canned) -> Vec<String> {
    let server = MockServer::new(vec![body]);
    let lw = KubeListerWatcher::new(Api::<Pod>::all(server.client.clone()));
    let stream = lw.watch(&WatchParams::default()).await.unwrap();
    stream
        .map(|item| match item {
            Ok(WatchEvent::Bookmark {
                resource_version,
                initial_events_end,
            }) => format!("BOOKMARK {resource_version} end={initial_events_end}"),
            Ok(WatchEvent::Error(status)) => format!("ERROR {} {}", status.code, status.reason),
            Ok(e) => format!("{} {}", e.type_name(), e.resource_version().unwrap()),
            Err(Error::Transport(_)) => "Err Transport".to_owned(),
            Err(Error::Decode { .. }) => "Err Decode".to_owned(),
            Err(e) => format!("Err {:?}", e.kind()),
        })
        .collect()
        .await
}

#[tokio::test]
async fn watch_events_carry_their_resource_versions() {
    let added = line("ADDED", &pod_json("a", "11"));
    let modified = line("MODIFIED", &pod_json("a", "12"));
    let deleted = line("DELETED", &pod_json("a", "13"));
    // A bookmark with null-filled fields, and an initial-events-end bookmark.
    let bookmark = line(
        "BOOKMARK",
        r#"{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"20","creationTimestamp":null},"spec":{"containers":null},"status":{}}"#,
    );
    let end = line(
        "BOOKMARK",
        r#"{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"21","annotations":{"k8s.io/initial-events-end":"true","other":"x"}}}"#,
    );
    // Events split across chunks anywhere, several events in one chunk.
    let all = format!("{added}{modified}{deleted}{bookmark}{end}");
    let (first, rest) = all.split_at(37);
    let (second, third) = rest.split_at(200);
    let got = watch_outcome(vec![Ok(first), Ok(second), Ok(third)]).await;
    assert_eq!(
        got,
        [
            "ADDED 11",
            "MODIFIED 12",
            "DELETED 13",
            "BOOKMARK 20 end=false",
            "BOOKMARK 21 end=true"
        ]
    );
}

#[tokio::test]
async fn error_events_reach_the_reflector_as_statuses() {
    let expired = line("ERROR", EXPIRED);
    let got = watch_outcome(vec![Ok(&line("ADDED", &pod_json("a", "11"))), Ok(&expired)]).await;
    assert_eq!(got, ["ADDED 11", "ERROR 410 Expired"]);

    // An ERROR whose object is not a Status: an error with no code.
    let got = watch_outcome(vec![Ok(&line("ERROR", "{}"))]).await;
    assert_eq!(got, ["ERROR 0 "]);
}

#[tokio::test]
async fn bad_watch_lines_are_decode_errors_never_events() {
    let good = line("ADDED", &pod_json("a", "11"));
    let cases: Vec<(String, &str)> = vec![
        ("this is not json\n".to_owned(), "garbage"),
        (line("EXPLODED", &pod_json("b", "12")), "unknown type"),
        (
            line(
                "ADDED",
                r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"b"}}"#,
            ),
            "no resourceVersion",
        ),
        (
            line(
                "BOOKMARK",
                r#"{"apiVersion":"v1","kind":"Pod","metadata":{}}"#,
            ),
            "bookmark without resourceVersion",
        ),
        (
            line(
                "BOOKMARK",
                r#"{"apiVersion":"v1","kind":"Pod","metadata":{"resourceVersion":""}}"#,
            ),
            "bookmark with an empty resourceVersion",
        ),
        (line("ADDED", r#""just a string""#), "not an object"),
        // Found by the `watch_decode` fuzz target (a model bug, but worth pinning): an ERROR
        // whose object is not a Status at all is not an event either.
        (
            line("ERROR", r#"{"kind":"Status","status":{"name":"c"}}"#),
            "ERROR with a malformed status",
        ),
    ];
    for (bad, what) in cases {
        let got = watch_outcome(vec![Ok(&good), Ok(&bad)]).await;
        assert_eq!(got, ["ADDED 11", "Err Decode"], "{what}");
    }
}

/// Found by the `watch_decode` fuzz target: a line that is not UTF-8 was reported as a transport
/// error (kube-client's line decoder says "invalid data"), which the reflector treats as a broken
/// connection. It is a bad line: a decode error.
#[tokio::test]
async fn a_watch_line_that_is_not_utf8_is_a_decode_error() {
    let good = line("ADDED", &pod_json("a", "11"));
    let mut body = good.clone().into_bytes();
    body.extend_from_slice(b"{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"\xff\"}}}\n");
    body.extend_from_slice(line("ADDED", &pod_json("c", "13")).as_bytes());
    let got = watch_outcome_of(Canned {
        status: 200,
        chunks: vec![Ok(Bytes::from(body))],
    })
    .await;
    assert_eq!(got, ["ADDED 11", "Err Decode"]);
}

#[tokio::test]
async fn a_torn_last_event_is_dropped_and_the_stream_just_ends() {
    let good = line("ADDED", &pod_json("a", "11"));
    let got = watch_outcome(vec![
        Ok(&good),
        Ok(r#"{"type":"MODIFIED","object":{"kind":"Po"#),
    ])
    .await;
    assert_eq!(got, ["ADDED 11"]);
}

#[tokio::test]
async fn a_connection_reset_mid_stream_is_a_transport_error() {
    let good = line("ADDED", &pod_json("a", "11"));
    let got = watch_outcome(vec![Ok(&good), Err(io::ErrorKind::ConnectionReset)]).await;
    // A transport error: the reflector resumes from 11 without relisting.
    assert_eq!(got, ["ADDED 11", "Err Transport"]);
}

#[tokio::test]
async fn a_410_answer_to_a_watch_is_an_expired_error() {
    let server = MockServer::new(vec![json(410, EXPIRED)]);
    let lw = KubeListerWatcher::new(Api::<Pod>::all(server.client.clone()));
    let err = lw.watch(&WatchParams::default()).await.err().unwrap();
    assert!(err.is_expired());
}

#[tokio::test]
async fn a_refused_connection_is_classified_as_such() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let config = kube::Config::new(format!("http://127.0.0.1:{port}").parse().unwrap());
    let client = kube::Client::try_from(config).unwrap();
    let lw = KubeListerWatcher::new(Api::<Pod>::all(client));
    let err = lw.list(&ListParams::default()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ConnectionRefused, "{err:?}");
    let err = lw.watch(&WatchParams::default()).await.err().unwrap();
    assert_eq!(err.kind(), ErrorKind::ConnectionRefused, "{err:?}");
}

/// A server that answers a metadata list with `item` in it, then a watch with `item` modified.
fn metadata_server(item: &str) -> MockServer {
    MockServer::new(vec![
        json(
            200,
            &format!(
                r#"{{"kind":"PartialObjectMetadataList","apiVersion":"meta.k8s.io/v1","metadata":{{"resourceVersion":"10"}},"items":[{item}]}}"#
            ),
        ),
        chunks(vec![Ok(&line("MODIFIED", item))]),
    ])
}

#[tokio::test]
async fn the_metadata_variant_asks_for_partial_object_metadata() {
    let item = r#"{"apiVersion":"meta.k8s.io/v1","kind":"PartialObjectMetadata","metadata":{"name":"a","namespace":"demo","resourceVersion":"3","labels":{"app":"web"}}}"#;
    let server = metadata_server(item);
    let lw = MetadataListerWatcher::new(Api::<Pod>::namespaced(server.client.clone(), "demo"));
    let page = lw.list(&ListParams::default()).await.unwrap();
    assert_eq!(page.resource_version, "10");
    let meta: &PartialObjectMeta<Pod> = &page.items[0];
    assert_eq!(key_func()(meta).unwrap(), "demo/a");
    assert_eq!(namespace_index_func()(meta).unwrap().as_slice(), ["demo"]);
    let events: Vec<_> = lw
        .watch(&WatchParams::default())
        .await
        .unwrap()
        .collect()
        .await;
    assert!(
        matches!(&events[..], [Ok(WatchEvent::Modified { resource_version, .. })] if resource_version == "3")
    );
    let accepts: Vec<_> = server
        .requests
        .lock()
        .iter()
        .map(|(_, a)| a.clone())
        .collect();
    assert!(
        accepts
            .iter()
            .all(|a| a.contains("as=PartialObjectMetadata")),
        "{accepts:?}"
    );
}

fn managed_pod_json(name: &str, rv: &str) -> String {
    format!(
        r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{name}","namespace":"demo","resourceVersion":"{rv}","managedFields":[{{"manager":"kubectl","operation":"Update","fieldsType":"FieldsV1","fieldsV1":{{"f:metadata":{{"f:labels":{{"f:managedFields":{{}}}}}}}}}}],"labels":{{"managedFields":"a label"}}}},"spec":{{"containers":[{{"name":"c","image":"nginx"}}]}}}}"#
    )
}

#[tokio::test]
async fn without_managed_fields_leaves_them_out_of_listed_and_watched_objects() {
    let list = format!(
        r#"{{"kind":"PodList","apiVersion":"v1","metadata":{{"resourceVersion":"10"}},"items":[{},{}]}}"#,
        managed_pod_json("a", "3"),
        managed_pod_json("b", "4")
    );
    let events = format!(
        "{}{}",
        line("ADDED", &managed_pod_json("c", "11")),
        line("MODIFIED", &managed_pod_json("a", "12"))
    );
    // The same bytes, decoded whole and without the managed fields.
    let responses = || {
        vec![
            json(200, &list),
            chunks(vec![
                Ok(&events[..100]),
                Ok(&events[100..]),
                Ok(r#"{"type":"MODIFIED","object":{"metadata":{"managedFields":[{"#),
            ]),
        ]
    };
    let whole = MockServer::new(responses());
    let skipping = MockServer::new(responses());
    let decoded = |server: &MockServer, skip: bool| {
        let lw = KubeListerWatcher::new(Api::<Pod>::all(server.client.clone()));
        let lw = if skip {
            lw.without_managed_fields()
        } else {
            lw
        };
        async move {
            let page = lw.list(&ListParams::default()).await.unwrap();
            let watched: Vec<Pod> = lw
                .watch(&WatchParams::default())
                .await
                .unwrap()
                .map(|e| match e.unwrap() {
                    WatchEvent::Added { object, .. } | WatchEvent::Modified { object, .. } => {
                        (*object).clone()
                    }
                    other => panic!("unexpected {other:?}"),
                })
                .collect()
                .await;
            let listed: Vec<Pod> = page.items.iter().map(|p| (**p).clone()).collect();
            (listed, watched)
        }
    };
    let (mut listed, mut watched) = decoded(&whole, false).await;
    let (listed_skipping, watched_skipping) = decoded(&skipping, true).await;
    assert_eq!(
        (listed.len(), watched.len()),
        (2, 2),
        "the torn line is dropped"
    );
    for pod in listed.iter_mut().chain(watched.iter_mut()) {
        assert!(pod.metadata.managed_fields.is_some());
        pod.metadata.managed_fields = None;
    }
    assert_eq!(listed_skipping, listed);
    assert_eq!(watched_skipping, watched);
    assert_eq!(
        listed_skipping[0].metadata.labels.as_ref().unwrap()["managedFields"],
        "a label"
    );
}

#[tokio::test]
async fn the_metadata_variant_leaves_out_managed_fields_too() {
    let item = r#"{"apiVersion":"meta.k8s.io/v1","kind":"PartialObjectMetadata","metadata":{"name":"a","namespace":"demo","resourceVersion":"3","managedFields":[{"manager":"m"}]}}"#;
    let server = metadata_server(item);
    let lw = MetadataListerWatcher::new(Api::<Pod>::namespaced(server.client.clone(), "demo"))
        .without_managed_fields();
    let page = lw.list(&ListParams::default()).await.unwrap();
    assert_eq!(page.items[0].metadata.name.as_deref(), Some("a"));
    assert_eq!(page.items[0].metadata.managed_fields, None);
    let events: Vec<_> = lw
        .watch(&WatchParams::default())
        .await
        .unwrap()
        .collect()
        .await;
    match &events[..] {
        [Ok(WatchEvent::Modified { object, .. })] => {
            assert_eq!(object.metadata.managed_fields, None);
        }
        other => panic!("unexpected {other:?}"),
    }
}

/// A lister-watcher whose one list response's body is what the test sends on the channel, as
/// it sends it.
fn channel_list() -> (
    tokio::sync::mpsc::UnboundedSender<Bytes>,
    KubeListerWatcher<Pod>,
) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Bytes>();
    let rx = Arc::new(Mutex::new(Some(rx)));
    let service = tower::service_fn(move |_req: Request<Body>| {
        let rx = rx.lock().take().expect("one request");
        async move {
            let frames = stream::unfold(rx, |mut rx| async move {
                let chunk = rx.recv().await?;
                Some((Ok::<_, io::Error>(http_body::Frame::data(chunk)), rx))
            });
            let body: TestBody = BodyExt::boxed(StreamBody::new(frames));
            Ok::<_, Infallible>(Response::builder().status(200).body(body).unwrap())
        }
    });
    let client = kube::Client::new(service, "default");
    (tx, KubeListerWatcher::new(Api::<Pod>::all(client)))
}

#[tokio::test]
async fn a_listed_response_is_handed_over_in_batches_as_it_is_decoded() {
    // One response with five items, sent in two parts: the second only once the first batch
    // has been handed over, so a lister-watcher that handed the page over at its end would
    // never finish.
    let (tx, lw) = channel_list();
    let batches = Arc::new(Mutex::new(Vec::<Vec<String>>::new()));
    let body = format!(
        r#"{{"kind":"PodList","apiVersion":"v1","metadata":{{"resourceVersion":"10"}},"items":[{},{},{},{},{}]}}"#,
        pod_json("a", "3"),
        pod_json("b", "4"),
        pod_json("c", "5"),
        pod_json("d", "6"),
        pod_json("e", "7")
    );
    let split = body.find(&pod_json("c", "5")).expect("a third item");
    let list = tokio::spawn({
        let batches = Arc::clone(&batches);
        async move {
            let mut hand_over = |batch: Vec<Arc<Pod>>| {
                let names = batch
                    .iter()
                    .map(|p| p.metadata.name.clone().unwrap_or_default());
                batches.lock().push(names.collect());
                Ok(())
            };
            let mut sink = ListSink::new().handing_over(2, &mut hand_over);
            let page = lw.list_into(&ListParams::default(), &mut sink).await;
            (page, sink.handed_over())
        }
    });
    tx.send(Bytes::from(body[..split].to_owned())).unwrap();
    informer_testing::eventually("the first batch handed over", || batches.lock().len() == 1).await;
    tx.send(Bytes::from(body[split..].to_owned())).unwrap();
    drop(tx);
    let (page, handed_over) = list.await.unwrap();
    let page = page.unwrap();
    assert_eq!(*batches.lock(), [vec!["a", "b"], vec!["c", "d"]]);
    assert_eq!(handed_over, 4);
    let kept: Vec<_> = page.items.iter().map(|p| p.metadata.name.clone()).collect();
    assert_eq!(kept, [Some("e".to_owned())], "the rest is the page's");
    assert_eq!(page.resource_version, "10");
}

#[tokio::test]
async fn a_hand_over_that_fails_ends_the_list_with_its_error() {
    let (tx, lw) = channel_list();
    let body = format!(
        r#"{{"kind":"PodList","apiVersion":"v1","metadata":{{"resourceVersion":"10"}},"items":[{},{}]}}"#,
        pod_json("a", "3"),
        pod_json("b", "4"),
    );
    tx.send(Bytes::from(body)).unwrap();
    drop(tx);
    let mut hand_over = |_: Vec<Arc<Pod>>| Err(Error::Other("the store refused".into()));
    let mut sink = ListSink::new().handing_over(1, &mut hand_over);
    let err = lw
        .list_into(&ListParams::default(), &mut sink)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("the store refused"), "{err}");
}

#[tokio::test]
async fn a_listed_item_is_interned_as_soon_as_it_is_decoded() {
    // The list body arrives in two parts; the second is sent only once the first item has been
    // interned, so a lister-watcher that interned the page at its end would never finish.
    let (tx, lw) = channel_list();

    let cached: Arc<Pod> = Arc::new(serde_json::from_str(&pod_json("a", "3")).unwrap());
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let intern: informer_reflector::ListInterner<Pod> = {
        let (cached, seen) = (Arc::clone(&cached), Arc::clone(&seen));
        Arc::new(move |listed: Arc<Pod>| {
            let name = listed.metadata.name.clone().unwrap_or_default();
            seen.lock().push(name.clone());
            if name == "a" {
                Arc::clone(&cached)
            } else {
                listed
            }
        })
    };
    let body = format!(
        r#"{{"kind":"PodList","apiVersion":"v1","metadata":{{"resourceVersion":"10"}},"items":[{},{}]}}"#,
        pod_json("a", "3"),
        pod_json("b", "4")
    );
    let split = body.rfind(r#"{"apiVersion""#).expect("a second item");
    let list = tokio::spawn(async move {
        let mut sink = ListSink::new().interning(Some(&intern));
        lw.list_into(&ListParams::default(), &mut sink).await
    });
    tx.send(Bytes::from(body[..split].to_owned())).unwrap();
    informer_testing::eventually("the first item interned", || seen.lock().len() == 1).await;
    tx.send(Bytes::from(body[split..].to_owned())).unwrap();
    drop(tx);
    let page = list.await.unwrap().unwrap();
    assert_eq!(*seen.lock(), ["a", "b"]);
    assert!(Arc::ptr_eq(&page.items[0], &cached));
    assert_eq!(page.items[1].metadata.name.as_deref(), Some("b"));
    assert_eq!(page.resource_version, "10");
}
