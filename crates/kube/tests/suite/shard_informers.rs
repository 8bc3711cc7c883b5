//! Informers that cache a shard set (KEP-5866), through the kube adapter and the factory,
//! against the simulator serving `shardSelector` and ignoring it: the same cache either way
//! (list, paginated list, streaming list, watch events after sync), `shardInfo` detected,
//! the shard set changed while running, children following their owner's shard, complementary
//! sets covering everything once, and the adapter's reading of `shardInfo` and of a refusal.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use informer::{HandlerOptions, ResourceEventHandler, SharedIndexInformer};
use informer_apiserver::{ApiServer, Config, ShardSelectorSupport};
use informer_factory::InformerOptions;
use informer_kube::{KubeInformerFactory, KubeListerWatcher, KubeSource};
use informer_reflector::{
    Error, ListParams, ListerWatcher, ServerFiltering, ShardBy, ShardField, ShardSelector,
};
use informer_testing::eventually;
use k8s_openapi::api::core::v1::ConfigMap;
use parking_lot::Mutex;
use serde_json::json;

const LONG: Duration = Duration::from_secs(20);
const NAMESPACES: [&str; 3] = ["a", "b", "c"];

async fn start(support: ShardSelectorSupport) -> ApiServer {
    let config = Config::for_tests(Duration::from_millis(200)).with_shard_selector(support);
    ApiServer::start(config).await.unwrap()
}

fn client(server: &ApiServer) -> kube::Client {
    kube::Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap()
}

fn config_map(ns: &str, name: &str, owner: Option<&str>) -> ConfigMap {
    let owners = owner.map(|uid| {
        json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "parent", "uid": uid,
                "controller": true}])
    });
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": ns, "ownerReferences": owners},
        "data": {"v": "0"}
    }))
    .unwrap()
}

/// Creates `n` config maps spread over [`NAMESPACES`], named `<prefix>-<i>`.
fn seed(server: &ApiServer, prefix: &str, n: usize) {
    for i in 0..n {
        let ns = NAMESPACES[i % NAMESPACES.len()];
        server
            .create(&config_map(ns, &format!("{prefix}-{i:03}"), None))
            .unwrap();
    }
}

fn key(cm: &ConfigMap) -> String {
    format!(
        "{}/{}",
        cm.metadata.namespace.as_deref().unwrap_or_default(),
        cm.metadata.name.as_deref().unwrap_or_default()
    )
}

/// The value `selector` hashes for `cm`, as the server (or `by`'s owner rule) reads it.
fn value(selector: &ShardSelector, by: ShardBy, cm: &ConfigMap) -> String {
    let meta = &cm.metadata;
    let owner = meta
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| o.uid.clone());
    match (selector.field(), by) {
        (ShardField::Namespace, _) => meta.namespace.clone(),
        (ShardField::Uid, ShardBy::Object) => meta.uid.clone(),
        (ShardField::Uid, ShardBy::Owner) => owner.or_else(|| meta.uid.clone()),
    }
    .unwrap_or_default()
}

/// The keys of the server's config maps that `selector` selects (hashing as `by` says).
fn expected(server: &ApiServer, selector: &ShardSelector, by: ShardBy) -> BTreeSet<String> {
    let (all, _) = server.list::<ConfigMap>(None).unwrap();
    all.iter()
        .filter(|cm| selector.matches(&value(selector, by, cm)))
        .map(key)
        .collect()
}

fn cached(informer: &SharedIndexInformer<ConfigMap>) -> BTreeSet<String> {
    informer.lister().keys().into_iter().collect()
}

/// Every notification, as `ADD key` / `UPDATE key` / `DELETE key`, with its object's uid.
#[derive(Default, Clone)]
struct Log(Arc<Mutex<Vec<(String, String)>>>);

impl Log {
    fn push(&self, kind: &str, key: &str, cm: &ConfigMap) {
        let uid = cm.metadata.uid.clone().unwrap_or_default();
        self.0.lock().push((format!("{kind} {key}"), uid));
    }

    fn len(&self) -> usize {
        self.0.lock().len()
    }

    /// The keys of the notifications of `kind` from the `from`th on.
    fn of(&self, kind: &str, from: usize) -> BTreeSet<String> {
        let prefix = format!("{kind} ");
        self.0.lock()[from..]
            .iter()
            .filter_map(|(e, _)| e.strip_prefix(&prefix).map(str::to_owned))
            .collect()
    }

    /// How many notifications of `kind` from the `from`th on.
    fn count(&self, kind: &str, from: usize) -> usize {
        let prefix = format!("{kind} ");
        let log = self.0.lock();
        log[from..]
            .iter()
            .filter(|(e, _)| e.starts_with(&prefix))
            .count()
    }
}

impl ResourceEventHandler<ConfigMap> for Log {
    fn on_add(&self, key: &str, cm: &Arc<ConfigMap>, _: bool) {
        self.push("ADD", key, cm);
    }
    fn on_update(&self, key: &str, _: &Arc<ConfigMap>, cm: &Arc<ConfigMap>) {
        self.push("UPDATE", key, cm);
    }
    fn on_delete(&self, key: &str, cm: &Arc<ConfigMap>, _: bool) {
        self.push("DELETE", key, cm);
    }
}

/// How the informer gets its state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Listing {
    /// One list, protobuf.
    List,
    /// Pages of 7, JSON.
    PagedJson,
    /// A streaming list.
    Streaming,
}

/// A started factory, its source JSON-only or not, with one informer for `options`.
async fn started(
    server: &ApiServer,
    listing: Listing,
    options: InformerOptions<ConfigMap>,
) -> (KubeInformerFactory, Arc<SharedIndexInformer<ConfigMap>>) {
    let mut source = KubeSource::new(client(server));
    if listing == Listing::PagedJson {
        source = source.json_only();
    }
    let factory = KubeInformerFactory::new(source)
        .with_streaming_list(listing == Listing::Streaming)
        .configure::<ConfigMap>(move |b| match listing {
            Listing::PagedJson => b.reflector_config(|r| r.with_page_size(7)),
            _ => b,
        });
    let informer = factory.informer_with::<ConfigMap>(options);
    factory.start().unwrap();
    let report = factory.wait_for_cache_sync(Some(LONG)).await;
    assert!(report.all_synced(), "{report}");
    (factory, informer)
}

fn half(i: u32) -> ShardSelector {
    ShardSelector::for_shards(ShardField::Uid, 2, [i]).unwrap()
}

/// Creates, updates and deletes config maps in and out of the shard set after sync.
fn churn(server: &ApiServer) {
    seed(server, "late", 12);
    let (all, _) = server.list::<ConfigMap>(None).unwrap();
    for (i, cm) in all.iter().enumerate() {
        let ns = cm.metadata.namespace.as_deref();
        let name = cm.metadata.name.as_deref().unwrap();
        match i % 4 {
            0 => {
                server.delete::<ConfigMap>(ns, name).unwrap();
            }
            1 => {
                let patch = json!({"data": {"v": "1"}});
                server.patch::<ConfigMap>(ns, name, &patch).unwrap();
            }
            _ => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cache_is_the_servers_objects_in_the_shard_set_whether_or_not_the_server_filters() {
    for support in [ShardSelectorSupport::Served, ShardSelectorSupport::Ignored] {
        for listing in [Listing::List, Listing::PagedJson, Listing::Streaming] {
            let server = start(support).await;
            seed(&server, "cm", 40);
            let shard = half(1);
            let options = InformerOptions::new().shards(Some(shard.clone()));
            let (factory, informer) = started(&server, listing, options).await;
            let what = format!("{support:?}, {listing:?}");
            let want = expected(&server, &shard, ShardBy::Object);
            assert!(!want.is_empty() && want.len() < 40, "{what}: a real split");
            assert_eq!(cached(&informer), want, "{what}: the listed state");
            let filtering = match (listing, support) {
                (Listing::Streaming, _) => ServerFiltering::Unknown,
                (_, ShardSelectorSupport::Served) => ServerFiltering::Filtered,
                (_, _) => ServerFiltering::NotFiltered,
            };
            assert_eq!(informer.server_filtering(), filtering, "{what}");
            assert_eq!(informer.stats().server_filtering, filtering, "{what}");

            let log = Log::default();
            informer
                .add_event_handler(log.clone(), HandlerOptions::default())
                .unwrap();
            churn(&server);
            let want = expected(&server, &shard, ShardBy::Object);
            eventually(&format!("{what}: the cache follows the shard"), || {
                cached(&informer) == want
            })
            .await;
            // Every object told of, deletions included, is one of the shard's.
            eventually(&format!("{what}: deletions and updates told"), || {
                log.count("DELETE", 0) > 0 && log.count("UPDATE", 0) > 0
            })
            .await;
            for (event, uid) in log.0.lock().iter() {
                assert!(shard.matches(uid), "{what}: {event} outside the shard set");
            }
            factory.shutdown().await.unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changing_the_shard_set_deletes_the_keys_that_left_and_adds_those_that_arrived() {
    for support in [ShardSelectorSupport::Served, ShardSelectorSupport::Ignored] {
        let server = start(support).await;
        seed(&server, "cm", 60);
        let quarter = |shards: &[u32]| {
            ShardSelector::for_shards(ShardField::Uid, 4, shards.iter().copied()).unwrap()
        };
        let (before, after) = (quarter(&[0, 1]), quarter(&[1, 2]));
        let options = InformerOptions::new().shards(Some(before.clone()));
        let (factory, informer) = started(&server, Listing::List, options).await;
        assert_eq!(
            cached(&informer),
            expected(&server, &before, ShardBy::Object)
        );
        let log = Log::default();
        informer
            .add_event_handler(log.clone(), HandlerOptions::default())
            .unwrap();
        eventually("the initial adds", || {
            log.of("ADD", 0) == expected(&server, &before, ShardBy::Object)
        })
        .await;
        let from = log.len();

        informer.set_shards(Some(after.clone()));
        assert_eq!(informer.shards(), Some(after.clone()));
        let want = expected(&server, &after, ShardBy::Object);
        eventually("the cache holds the new set", || cached(&informer) == want).await;
        let left = expected(&server, &quarter(&[0]), ShardBy::Object);
        let arrived = expected(&server, &quarter(&[2]), ShardBy::Object);
        eventually("the changes are delivered", || {
            log.count("DELETE", from) == left.len() && log.count("ADD", from) == arrived.len()
        })
        .await;
        assert_eq!(log.of("DELETE", from), left, "{support:?}");
        assert_eq!(log.of("ADD", from), arrived, "{support:?}");
        // What stayed (shard 1) is neither deleted nor added again.
        let stayed = expected(&server, &quarter(&[1]), ShardBy::Object);
        assert!(log.of("DELETE", from).is_disjoint(&stayed));
        assert!(log.of("ADD", from).is_disjoint(&stayed));

        // Back to every object.
        informer.set_shards(None);
        eventually("every object", || cached(&informer).len() == 60).await;
        factory.shutdown().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn complementary_shard_sets_cover_every_object_exactly_once() {
    for support in [ShardSelectorSupport::Served, ShardSelectorSupport::Ignored] {
        let server = start(support).await;
        seed(&server, "cm", 50);
        let sets = [[0, 2], [1, 3]]
            .map(|shards| ShardSelector::for_shards(ShardField::Uid, 4, shards).unwrap());
        let factory = KubeInformerFactory::new(KubeSource::new(client(&server)));
        let informers = sets.clone().map(|set| {
            factory.informer_with::<ConfigMap>(InformerOptions::new().shards(Some(set)))
        });
        assert!(
            !Arc::ptr_eq(&informers[0], &informers[1]),
            "one informer per set"
        );
        let again = InformerOptions::new().shards(Some(sets[0].clone()));
        assert!(Arc::ptr_eq(
            &informers[0],
            &factory.informer_with::<ConfigMap>(again)
        ));
        let every = factory.informer::<ConfigMap>();
        assert_eq!(factory.informers().len(), 3);
        factory.start().unwrap();
        assert!(factory.wait_for_cache_sync(Some(LONG)).await.all_synced());
        churn(&server);
        let all: BTreeSet<String> = server
            .list::<ConfigMap>(None)
            .unwrap()
            .0
            .iter()
            .map(key)
            .collect();
        eventually("each set follows the server", || {
            sets.iter()
                .zip(&informers)
                .all(|(set, i)| cached(i) == expected(&server, set, ShardBy::Object))
                && cached(&every) == all
        })
        .await;
        let (one, two) = (cached(&informers[0]), cached(&informers[1]));
        assert!(one.is_disjoint(&two), "{support:?}: an object cached twice");
        assert_eq!(&one | &two, all, "{support:?}: an object cached by none");
        factory.shutdown().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn children_follow_their_controllers_shard_on_the_client_only() {
    let server = start(ShardSelectorSupport::Served).await;
    server.record_requests(true);
    let parents: Vec<ConfigMap> = (0..12)
        .map(|i| {
            let cm = config_map("a", &format!("parent-{i:02}"), None);
            server.create(&cm).unwrap()
        })
        .collect();
    for (i, parent) in parents.iter().enumerate() {
        let uid = parent.metadata.uid.as_deref().unwrap();
        for j in 0..3 {
            let ns = NAMESPACES[j % NAMESPACES.len()];
            let child = config_map(ns, &format!("child-{i:02}-{j}"), Some(uid));
            server.create(&child).unwrap();
        }
    }
    let shard = half(0);
    let options = InformerOptions::new()
        .shards(Some(shard.clone()))
        .shard_by(ShardBy::Owner);
    let (factory, informer) = started(&server, Listing::List, options).await;
    let want = expected(&server, &shard, ShardBy::Owner);
    assert_eq!(cached(&informer), want);
    // Each child is where its parent is.
    for parent in &parents {
        let name = parent.metadata.name.as_deref().unwrap();
        let i = &name["parent-".len()..];
        let parent_in = want.contains(&format!("a/{name}"));
        for j in 0..3 {
            let child = format!("{}/child-{i}-{j}", NAMESPACES[j % NAMESPACES.len()]);
            assert_eq!(cached(&informer).contains(&child), parent_in, "{child}");
        }
    }
    // The server cannot hash an owner: nothing is sent, and it said nothing.
    let sent = server.recorded_requests();
    assert!(sent.iter().any(|r| r.path.ends_with("/configmaps")));
    assert!(sent.iter().all(|r| r.param("shardSelector").is_none()));
    assert_eq!(informer.server_filtering(), ServerFiltering::Unknown);

    // A new child of a parent in the set arrives; one of a parent outside does not.
    let inside = parents.iter().find(|p| want.contains(&key(p))).unwrap();
    let outside = parents.iter().find(|p| !want.contains(&key(p))).unwrap();
    for (parent, name) in [(inside, "late-in"), (outside, "late-out")] {
        let uid = parent.metadata.uid.as_deref();
        server.create(&config_map("b", name, uid)).unwrap();
    }
    eventually("the new child of a parent in the set", || {
        cached(&informer).contains("b/late-in")
    })
    .await;
    assert_eq!(cached(&informer), expected(&server, &shard, ShardBy::Owner));
    factory.shutdown().await.unwrap();

    // By namespace, an owner and its children share the value: the server filters.
    let by_namespace = ShardSelector::for_shards(ShardField::Namespace, 2, [0]).unwrap();
    server.clear_recorded_requests();
    let options = InformerOptions::new()
        .shards(Some(by_namespace.clone()))
        .shard_by(ShardBy::Owner);
    let (factory, informer) = started(&server, Listing::List, options).await;
    let want = expected(&server, &by_namespace, ShardBy::Object);
    assert_eq!(cached(&informer), want);
    assert_eq!(informer.server_filtering(), ServerFiltering::Filtered);
    let sent = server.recorded_requests();
    let text = by_namespace.to_string();
    assert!(
        sent.iter()
            .any(|r| r.param("shardSelector") == Some(text.clone()))
    );
    factory.shutdown().await.unwrap();
}

/// One list through the adapter with `shard_selector`, JSON or protobuf.
async fn list_once(
    server: &ApiServer,
    json: bool,
    shard_selector: Option<String>,
) -> Result<informer_reflector::ListPage<ConfigMap>, Error> {
    let mut lw = KubeListerWatcher::<ConfigMap>::new(kube::Api::all(client(server)));
    if json {
        lw = lw.json_only();
    }
    let params = ListParams {
        shard_selector,
        ..ListParams::default()
    };
    lw.list(&params).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_adapter_reads_shard_info_in_both_encodings_and_types_a_refusal() {
    let text = half(0).to_string();
    for support in [ShardSelectorSupport::Served, ShardSelectorSupport::Ignored] {
        let server = start(support).await;
        seed(&server, "cm", 10);
        for json in [false, true] {
            let page = list_once(&server, json, Some(text.clone())).await.unwrap();
            let served = support == ShardSelectorSupport::Served;
            let want = served.then(|| text.clone());
            assert_eq!(page.shard_info, want, "{support:?}, json {json}");
            let listed: BTreeSet<String> = page.items.iter().map(|cm| key(cm)).collect();
            match served {
                true => assert_eq!(listed, expected(&server, &half(0), ShardBy::Object)),
                false => assert_eq!(listed.len(), 10),
            }
            let plain = list_once(&server, json, None).await.unwrap();
            assert_eq!(plain.shard_info, None);
        }
        // A selector the server cannot parse: a typed refusal, when the server reads it.
        let bad = "shardRange(object.metadata.uid, '0x0', '0x8000000000000000')".to_owned();
        let refused = list_once(&server, false, Some(bad.clone())).await;
        match support {
            ShardSelectorSupport::Served => match refused {
                Err(Error::ShardSelectorRefused { selector, status }) => {
                    assert_eq!((selector, status.code), (bad, 400));
                }
                other => panic!("not a typed refusal: {:?}", other.map(|p| p.items.len())),
            },
            _ => assert!(refused.is_ok()),
        }
    }
}
