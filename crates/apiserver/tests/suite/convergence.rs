//! The protocol's central promise, checked end to end through kube-client under random writes:
//! a paginated list at any retained revision, followed by a selective watch from that revision,
//! reproduces the server's state exactly — no gap, no duplicate, selector transitions included.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use informer_apiserver::{ApiServer, Config};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ListParams, VersionMatch, WatchEvent, WatchParams};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(10);

/// name → (resourceVersion, app label)
type State = BTreeMap<String, (String, String)>;

fn random_write(server: &ApiServer, rng: &mut StdRng) {
    let ns = ["ns-a", "ns-b"][rng.random_range(0..2)];
    let name = format!("p{}", rng.random_range(0..15));
    let app = ["x", "y"][rng.random_range(0..2)];
    let exists = server.get::<Pod>(Some(ns), &name).is_ok();
    let result = match (exists, rng.random_range(0..4)) {
        (false, _) => server
            .create(
                &serde_json::from_value::<Pod>(json!({
                    "metadata": {"name": name, "namespace": ns, "labels": {"app": app}},
                    "spec": {"containers": [{"name": "c", "image": "i"}]},
                }))
                .unwrap(),
            )
            .map(drop),
        (true, 0) => server.delete::<Pod>(Some(ns), &name).map(drop),
        (true, _) => server
            .patch::<Pod>(
                Some(ns),
                &name,
                &json!({"metadata": {"labels": {"app": app, "n": rng.random_range(0..1000).to_string()}}}),
            )
            .map(drop),
    };
    result.expect("a valid write");
}

fn entry(p: &Pod) -> (String, (String, String)) {
    (
        format!("{}/{}", p.namespace().unwrap(), p.name_any()),
        (
            p.resource_version().unwrap(),
            p.labels().get("app").cloned().unwrap_or_default(),
        ),
    )
}

#[tokio::test]
async fn list_then_watch_from_any_retained_revision_converges() {
    for seed in 0..4u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let server = ApiServer::start(Config {
            history_size: 400,
            ..Config::for_tests(Duration::from_millis(50))
        })
        .await
        .unwrap();
        let mut config = kube::Config::new(server.url().parse().unwrap());
        config.default_retry = false;
        let api: Api<Pod> = Api::all(kube::Client::try_from(config).unwrap());

        for _ in 0..300 {
            random_write(&server, &mut rng);
        }
        let floor = server.history_floor();
        let at = rng.random_range(floor..=server.resource_version());

        // Paginated Exact list at `at`.
        let mut state = State::new();
        let mut lp = ListParams::default()
            .labels("app=x")
            .limit(4)
            .at(&at.to_string())
            .matching(VersionMatch::Exact);
        loop {
            let page = api.list(&lp).await.unwrap();
            assert_eq!(page.metadata.resource_version, Some(at.to_string()));
            state.extend(page.items.iter().map(entry));
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => {
                    lp = ListParams::default()
                        .labels("app=x")
                        .limit(4)
                        .continue_token(&token);
                }
                None => break,
            }
        }

        // Watch from `at` while more writes happen.
        let mut stream = api
            .watch(&WatchParams::default().labels("app=x"), &at.to_string())
            .await
            .unwrap()
            .boxed();
        for _ in 0..100 {
            random_write(&server, &mut rng);
        }
        let head = server.resource_version();
        loop {
            let event = tokio::time::timeout(WAIT, stream.next())
                .await
                .expect("events until a bookmark at the head")
                .expect("open stream")
                .expect("decodable");
            match event {
                WatchEvent::Added(p) | WatchEvent::Modified(p) => {
                    let (k, v) = entry(&p);
                    assert_eq!(v.1, "x", "only matching objects are sent");
                    state.insert(k, v);
                }
                WatchEvent::Deleted(p) => {
                    let (k, _) = entry(&p);
                    assert!(
                        state.remove(&k).is_some(),
                        "seed {seed}: DELETED of unknown {k}"
                    );
                }
                WatchEvent::Bookmark(b) => {
                    if b.metadata.resource_version.parse::<u64>().unwrap() >= head {
                        break;
                    }
                }
                WatchEvent::Error(e) => panic!("seed {seed}: {e:?}"),
            }
        }

        let (all, _) = server.list::<Pod>(None).unwrap();
        let expected: State = all
            .iter()
            .map(entry)
            .filter(|(_, (_, app))| app == "x")
            .collect();
        assert_eq!(state, expected, "seed {seed} from revision {at}");
        server.shutdown().await;
    }
}
