//! Server-side sharded list and watch (KEP-5866) through kube-client: `shardSelector` on lists
//! (pages included), watches and streaming lists, `metadata.shardInfo`, the 400s of malformed
//! selectors, and a server that ignores the parameter.

use crate::http;
use crate::kube_setup;

use std::collections::BTreeSet;
use std::time::Duration;

use futures::{Stream, StreamExt};
use informer_apiserver::{ApiServer, Config, ShardSelectorSupport};
use informer_shard::{ShardField, ShardRange, ShardSelector};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::WatchEvent;
use kube::core::ObjectList;
use serde_json::json;

use kube_setup::start_with;

/// Generous bound for anything that should happen "at once".
const WAIT: Duration = Duration::from_secs(10);
const DEMO: &str = "/api/v1/namespaces/demo/configmaps";
const ALL: &str = "/api/v1/configmaps";

async fn start() -> (ApiServer, kube::Client) {
    start_with(Config::for_tests(Duration::from_millis(100))).await
}

/// Creates config maps `cm-<i>` for `i` in `range` in `ns` (the even ones labelled
/// `app=web`), each with the random v4 uid the server gives it.
fn seed(server: &ApiServer, ns: &str, range: std::ops::Range<usize>) -> Vec<ConfigMap> {
    range
        .map(|i| {
            let labels = if i % 2 == 0 {
                json!({"app": "web"})
            } else {
                json!({})
            };
            let cm: ConfigMap = serde_json::from_value(json!({
                "metadata": {"name": format!("cm-{i:03}"), "namespace": ns, "labels": labels},
            }))
            .unwrap();
            server.create(&cm).unwrap()
        })
        .collect()
}

/// `namespace/name`.
fn key(cm: &ConfigMap) -> String {
    format!(
        "{}/{}",
        cm.metadata.namespace.as_deref().unwrap_or_default(),
        cm.metadata.name.as_deref().unwrap_or_default()
    )
}

fn selects(selector: &ShardSelector, cm: &ConfigMap) -> bool {
    let value = match selector.field() {
        ShardField::Uid => cm.metadata.uid.as_deref(),
        ShardField::Namespace => cm.metadata.namespace.as_deref(),
    };
    selector.matches(value.unwrap_or_default())
}

/// The keys of the objects of `all` that `selector` selects.
fn expected<'a>(
    all: impl IntoIterator<Item = &'a ConfigMap>,
    selector: &ShardSelector,
) -> BTreeSet<String> {
    all.into_iter()
        .filter(|cm| selects(selector, cm))
        .map(key)
        .collect()
}

fn keys(items: &[ConfigMap]) -> BTreeSet<String> {
    items.iter().map(key).collect()
}

/// `GET path?query` as kube-client sends it.
fn get(path: &str, query: &[(&str, &str)]) -> axum::http::Request<Vec<u8>> {
    let query = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(query)
        .finish();
    axum::http::Request::get(format!("{path}?{query}"))
        .body(Vec::new())
        .unwrap()
}

async fn list(
    client: &kube::Client,
    path: &str,
    query: &[(&str, &str)],
) -> kube::Result<ObjectList<ConfigMap>> {
    client.request(get(path, query)).await
}

type Events = std::pin::Pin<Box<dyn Stream<Item = kube::Result<WatchEvent<ConfigMap>>> + Send>>;

async fn watch(client: &kube::Client, path: &str, query: &[(&str, &str)]) -> kube::Result<Events> {
    let events = client.request_events::<ConfigMap>(get(path, query)).await?;
    Ok(events.boxed())
}

/// The next event, within [`WAIT`].
async fn next(events: &mut Events) -> WatchEvent<ConfigMap> {
    tokio::time::timeout(WAIT, events.next())
        .await
        .expect("an event in time")
        .expect("the stream is open")
        .expect("a decodable event")
}

/// The events of a watch (as `TYPE namespace/name`) until a bookmark at `rv` or later: every
/// change through `rv` has then been sent or filtered out.
async fn events_through(events: &mut Events, rv: u64) -> Vec<String> {
    let mut seen = Vec::new();
    loop {
        match next(events).await {
            WatchEvent::Bookmark(b) => {
                if b.metadata.resource_version.parse::<u64>().unwrap() >= rv {
                    return seen;
                }
            }
            WatchEvent::Added(cm) => seen.push(format!("ADDED {}", key(&cm))),
            WatchEvent::Modified(cm) => seen.push(format!("MODIFIED {}", key(&cm))),
            WatchEvent::Deleted(cm) => seen.push(format!("DELETED {}", key(&cm))),
            WatchEvent::Error(e) => panic!("an error event: {e:?}"),
        }
    }
}

fn half(index: u32) -> ShardSelector {
    ShardSelector::for_shards(ShardField::Uid, 2, [index]).unwrap()
}

#[tokio::test]
async fn a_list_keeps_the_objects_in_its_ranges_and_echoes_the_selector() {
    let (server, client) = start().await;
    let cms = seed(&server, "demo", 0..40);
    let quarters = ShardRange::split(4).unwrap();
    let first_and_third = ShardSelector::new(ShardField::Uid, [quarters[0], quarters[2]]).unwrap();
    for selector in [half(0), half(1), first_and_third] {
        let text = selector.to_string();
        let listed = list(&client, DEMO, &[("shardSelector", &text)])
            .await
            .unwrap();
        let want = expected(&cms, &selector);
        assert!(
            !want.is_empty() && want.len() < cms.len(),
            "{text}: {want:?}"
        );
        assert_eq!(keys(&listed.items), want, "{text}");
        let info = listed
            .metadata
            .shard_info
            .expect("shardInfo on a sharded list");
        assert_eq!(info.selector, text);

        // ANDed with the label selector.
        let query = [
            ("shardSelector", text.as_str()),
            ("labelSelector", "app=web"),
        ];
        let web = list(&client, DEMO, &query).await.unwrap();
        let labelled = cms.iter().filter(|cm| {
            let labels = cm.metadata.labels.as_ref();
            labels.is_some_and(|l| l.get("app").is_some_and(|app| app == "web"))
        });
        assert_eq!(keys(&web.items), expected(labelled, &selector), "{text}");
    }
    // No selector, or an empty one, is no sharding.
    for query in [&[][..], &[("shardSelector", "")][..]] {
        let listed = list(&client, DEMO, query).await.unwrap();
        assert_eq!(listed.items.len(), cms.len());
        assert_eq!(listed.metadata.shard_info, None);
    }
}

#[tokio::test]
async fn the_shards_of_a_split_partition_the_collection() {
    let (server, client) = start().await;
    let mut cms = Vec::new();
    for ns in [
        "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf",
    ] {
        cms.extend(seed(&server, ns, 0..6));
    }
    let everything = keys(&list(&client, ALL, &[]).await.unwrap().items);
    assert_eq!(everything.len(), cms.len());
    for field in [ShardField::Uid, ShardField::Namespace] {
        for count in [1, 2, 3, 5, 8] {
            let mut seen = BTreeSet::new();
            for shard in 0..count {
                let selector = ShardSelector::for_shards(field, count, [shard]).unwrap();
                let text = selector.to_string();
                let listed = list(&client, ALL, &[("shardSelector", &text)])
                    .await
                    .unwrap();
                for cm in &listed.items {
                    assert!(selects(&selector, cm), "{} in {text}", key(cm));
                    assert!(seen.insert(key(cm)), "{} in two shards of {count}", key(cm));
                }
            }
            assert_eq!(seen, everything, "{field} in {count} shards");
        }
    }
}

#[tokio::test]
async fn pagination_keeps_the_filter_across_pages() {
    let (server, client) = start().await;
    let cms = seed(&server, "demo", 0..50);
    let selector = half(1);
    let text = selector.to_string();
    let (mut pages, mut seen, mut token) = (0, BTreeSet::new(), String::new());
    loop {
        let mut query = vec![("shardSelector", text.as_str()), ("limit", "4")];
        if !token.is_empty() {
            query.push(("continue", token.as_str()));
        }
        let page = list(&client, DEMO, &query).await.unwrap();
        pages += 1;
        assert!(page.items.len() <= 4);
        assert_eq!(
            page.metadata.shard_info.map(|i| i.selector),
            Some(text.clone())
        );
        // A count of the remaining items would not be of the matching ones.
        assert_eq!(page.metadata.remaining_item_count, None);
        for cm in &page.items {
            assert!(seen.insert(key(cm)), "{} twice", key(cm));
        }
        match page.metadata.continue_ {
            Some(next) if !next.is_empty() => token = next,
            _ => break,
        }
    }
    assert_eq!(seen, expected(&cms, &selector));
    assert!(pages > 2, "{pages} pages");
}

#[tokio::test]
async fn a_watch_sends_only_the_events_of_its_shard() {
    let (server, client) = start().await;
    let from = server.resource_version().to_string();
    let mut watches = Vec::new();
    for index in [0, 1] {
        let text = half(index).to_string();
        let query = [
            ("watch", "1"),
            ("resourceVersion", from.as_str()),
            ("allowWatchBookmarks", "true"),
            ("shardSelector", text.as_str()),
        ];
        watches.push((half(index), watch(&client, DEMO, &query).await.unwrap()));
    }
    let cms = seed(&server, "demo", 0..30);
    for cm in &cms {
        let name = cm.metadata.name.as_deref().unwrap();
        let patch = json!({"data": {"touched": "yes"}});
        server
            .patch::<ConfigMap>(Some("demo"), name, &patch)
            .unwrap();
    }
    for cm in &cms {
        let name = cm.metadata.name.as_deref().unwrap();
        server.delete::<ConfigMap>(Some("demo"), name).unwrap();
    }
    let end = server.resource_version();
    for (selector, events) in &mut watches {
        let mine: Vec<&ConfigMap> = cms.iter().filter(|cm| selects(selector, cm)).collect();
        assert!(!mine.is_empty() && mine.len() < cms.len());
        let want: Vec<String> = ["ADDED", "MODIFIED", "DELETED"]
            .iter()
            .flat_map(|ty| mine.iter().map(move |cm| format!("{ty} {}", key(cm))))
            .collect();
        assert_eq!(events_through(events, end).await, want, "{selector}");
    }
}

#[tokio::test]
async fn a_streaming_list_sends_the_initial_events_of_its_shard_only() {
    let (server, client) = start().await;
    let before = seed(&server, "demo", 0..20);
    let selector = half(0);
    let text = selector.to_string();
    let query = [
        ("watch", "1"),
        ("sendInitialEvents", "true"),
        ("resourceVersionMatch", "NotOlderThan"),
        ("allowWatchBookmarks", "true"),
        ("shardSelector", text.as_str()),
    ];
    let mut events = watch(&client, DEMO, &query).await.unwrap();
    let mut initial = BTreeSet::new();
    loop {
        match next(&mut events).await {
            WatchEvent::Added(cm) => assert!(initial.insert(key(&cm))),
            WatchEvent::Bookmark(b)
                if b.metadata
                    .annotations
                    .contains_key(informer_apiserver::INITIAL_EVENTS_END_ANNOTATION) =>
            {
                break;
            }
            WatchEvent::Bookmark(_) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(initial, expected(&before, &selector));

    // Then the changes, of the shard's objects only.
    let after = seed(&server, "demo", 20..40);
    let want: Vec<String> = after
        .iter()
        .filter(|cm| selects(&selector, cm))
        .map(|cm| format!("ADDED {}", key(cm)))
        .collect();
    let end = server.resource_version();
    assert_eq!(events_through(&mut events, end).await, want);
}

#[tokio::test]
async fn a_server_that_ignores_the_parameter_sends_everything_and_no_shard_info() {
    let config = Config::for_tests(Duration::from_millis(100))
        .with_shard_selector(ShardSelectorSupport::Ignored);
    let (server, client) = start_with(config).await;
    let cms = seed(&server, "demo", 0..20);
    let from = server.resource_version().to_string();
    let lower = half(0).to_string();
    // A valid selector and a malformed one alike: the parameter is unknown.
    for text in [lower.as_str(), "shardRange(nonsense"] {
        let listed = list(&client, DEMO, &[("shardSelector", text)])
            .await
            .unwrap();
        assert_eq!(keys(&listed.items), keys(&cms), "{text}");
        assert_eq!(listed.metadata.shard_info, None, "{text}");
    }
    let query = [
        ("watch", "1"),
        ("resourceVersion", from.as_str()),
        ("allowWatchBookmarks", "true"),
        ("shardSelector", lower.as_str()),
    ];
    let mut events = watch(&client, DEMO, &query).await.unwrap();
    let more = seed(&server, "demo", 20..30);
    let want: Vec<String> = more.iter().map(|cm| format!("ADDED {}", key(cm))).collect();
    assert_eq!(
        events_through(&mut events, server.resource_version()).await,
        want
    );
}

/// The `Status` of a refused request.
fn refusal<T>(result: kube::Result<T>) -> Box<kube::core::Status> {
    match result {
        Err(kube::Error::Api(status)) => status,
        Err(other) => panic!("expected an API error, got {other}"),
        Ok(_) => panic!("expected an API error, got a success"),
    }
}

const MALFORMED: &[&str] = &[
    " ",
    "shardRange(object.metadata.uid, '0x0', '0x8000000000000000')",
    "shardRange(object.metadata.uid, '0X0000000000000000', '0x8000000000000000')",
    "shardRange(object.metadata.uid, '0x0000000000000000', '0x800000000000000A')",
    "shardRange(object.metadata.uid, '0x8000000000000000', '0x8000000000000000')",
    "shardRange(object.metadata.uid, '0x0000000000000000', '0x20000000000000000')",
    "shardRange(object.metadata.uid, 0, 8)",
    "shardRange(object.metadata.name, '0x0000000000000000', '0x8000000000000000')",
    "shardRange(metadata.uid, '0x0000000000000000', '0x8000000000000000')",
    "shardRange(object.metadata.uid, '0x0000000000000000')",
    "hashRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')",
    "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000') && \
     shardRange(object.metadata.uid, '0x8000000000000000', '0x10000000000000000')",
    "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000') || \
     shardRange(object.metadata.namespace, '0x8000000000000000', '0x10000000000000000')",
    "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000",
    "object.metadata.uid > '0x0'",
];

#[tokio::test]
async fn malformed_selectors_are_bad_requests_naming_the_problem() {
    let (server, client) = start().await;
    seed(&server, "demo", 0..3);
    for text in MALFORMED {
        let why = text.parse::<ShardSelector>().expect_err(text);
        let message = format!("invalid shard selector: {why}");
        let listed = refusal(list(&client, DEMO, &[("shardSelector", text)]).await);
        let watched =
            refusal(watch(&client, DEMO, &[("watch", "1"), ("shardSelector", text)]).await);
        for status in [listed, watched] {
            assert_eq!(status.code, 400, "{text}");
            assert_eq!(status.reason, "BadRequest", "{text}");
            assert_eq!(status.message, message, "{text}");
        }
    }
    // Decoded with the options, before they are validated: 400 where they alone are a 422.
    let invalid = [("resourceVersionMatch", "Exact")];
    assert_eq!(refusal(list(&client, DEMO, &invalid).await).code, 422);
    let both = [
        ("resourceVersionMatch", "Exact"),
        ("shardSelector", MALFORMED[1]),
    ];
    assert_eq!(refusal(list(&client, DEMO, &both).await).code, 400);
}

#[tokio::test]
async fn a_collection_delete_deletes_its_shard_only() {
    let (server, client) = start().await;
    let cms = seed(&server, "demo", 0..30);
    let selector = half(1);
    let query = form_urlencoded::Serializer::new(String::new())
        .append_pair("shardSelector", &selector.to_string())
        .finish();
    let delete = |query: String| {
        axum::http::Request::delete(format!("{DEMO}?{query}"))
            .body(Vec::new())
            .unwrap()
    };
    let malformed = form_urlencoded::Serializer::new(String::new())
        .append_pair("shardSelector", MALFORMED[1])
        .finish();
    assert_eq!(
        refusal(client.request_text(delete(malformed)).await).code,
        400
    );
    client.request_text(delete(query)).await.unwrap();
    let left = keys(&list(&client, DEMO, &[]).await.unwrap().items);
    assert_eq!(left, expected(&cms, &half(0)));
}

#[cfg(feature = "protobuf")]
mod protobuf {
    use k8s_pb::apimachinery::pkg::apis::meta::v1::Status;
    use k8s_pb::apimachinery::pkg::runtime::Unknown;
    use prost::Message as _;

    use super::*;

    /// The head of a list message with `ListMeta.shardInfo`, which k8s-pb 0.9 predates.
    #[derive(Clone, PartialEq, prost::Message)]
    struct ListHead {
        #[prost(message, optional, tag = "1")]
        metadata: Option<ListMetaHead>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    struct ListMetaHead {
        #[prost(string, optional, tag = "2")]
        resource_version: Option<String>,
        #[prost(message, optional, tag = "5")]
        shard_info: Option<ShardInfo>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    struct ShardInfo {
        #[prost(string, optional, tag = "1")]
        selector: Option<String>,
    }

    async fn get_protobuf(server: &ApiServer, selector: &str) -> http::Answer {
        let query = form_urlencoded::Serializer::new(String::new())
            .append_pair("shardSelector", selector)
            .finish();
        let accept = [("Accept", "application/vnd.kubernetes.protobuf")];
        http::send(server, "GET", &format!("{DEMO}?{query}"), &accept, b"").await
    }

    fn raw(answer: &http::Answer) -> Vec<u8> {
        let envelope = answer
            .body
            .strip_prefix(b"k8s\0")
            .expect("the protobuf magic");
        Unknown::decode(envelope).unwrap().raw.unwrap_or_default()
    }

    #[tokio::test]
    async fn protobuf_lists_carry_shard_info_and_refusals_are_protobuf_statuses() {
        let (server, _client) = start().await;
        seed(&server, "demo", 0..5);
        let text = half(0).to_string();
        let answer = get_protobuf(&server, &text).await;
        assert_eq!(answer.status, 200);
        let head = ListHead::decode(&raw(&answer)[..]).unwrap();
        let info = head.metadata.and_then(|m| m.shard_info);
        assert_eq!(info.and_then(|i| i.selector), Some(text));

        let answer = get_protobuf(&server, MALFORMED[1]).await;
        assert_eq!(answer.status, 400);
        let status = Status::decode(&raw(&answer)[..]).unwrap();
        assert_eq!(status.code, Some(400));
        assert_eq!(status.reason.as_deref(), Some("BadRequest"));
        assert!(
            status
                .message
                .unwrap()
                .starts_with("invalid shard selector: ")
        );
    }
}
