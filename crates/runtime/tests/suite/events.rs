//! The event recorder against the simulator: an Event per first occurrence, in the object's
//! namespace, with the reporter, the reason, the action and the note; repeats counted in its
//! series; another reason, another Event; a zero window, an Event each time; a deleted Event
//! starts its series again.

use std::time::Duration;

use informer_apiserver::{ApiServer, Config};
use informer_runtime::events::{EventSpec, EventType, Recorder, Reporter};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::{DeleteParams, ListParams};

fn spec(type_: EventType, reason: &str, note: &str) -> EventSpec {
    EventSpec {
        type_,
        reason: reason.into(),
        action: "Reconcile".into(),
        note: Some(note.into()),
        related: None,
    }
}

fn pod_ref() -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        namespace: Some("demo".into()),
        name: Some("web-0".into()),
        uid: Some("uid-1".into()),
        ..ObjectReference::default()
    }
}

async fn events(api: &Api<Event>) -> Vec<Event> {
    let mut events = api.list(&ListParams::default()).await.unwrap().items;
    events.sort_by_key(|e| e.metadata.name.clone());
    events
}

#[tokio::test]
async fn repeats_count_in_a_series_and_new_ones_get_their_own_event() {
    let server = ApiServer::start(Config::for_tests(Duration::from_secs(60)).register::<Event>())
        .await
        .expect("server starts");
    let client = kube::Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap();
    let api: Api<Event> = Api::namespaced(client.clone(), "demo");
    let reporter = Reporter {
        controller: "example.com/widgets".into(),
        instance: Some("replica-0".into()),
    };
    let recorder = Recorder::new(client.clone(), reporter.clone());

    recorder
        .publish(
            &spec(EventType::Normal, "Created", "made a child"),
            &pod_ref(),
        )
        .await
        .unwrap();
    let first = events(&api).await;
    assert_eq!(first.len(), 1);
    let e = &first[0];
    assert!(e.metadata.name.as_deref().unwrap().starts_with("web-0."));
    assert_eq!(e.metadata.namespace.as_deref(), Some("demo"));
    assert_eq!(e.type_.as_deref(), Some("Normal"));
    assert_eq!(e.reason.as_deref(), Some("Created"));
    assert_eq!(e.action.as_deref(), Some("Reconcile"));
    assert_eq!(e.note.as_deref(), Some("made a child"));
    assert_eq!(e.regarding.as_ref(), Some(&pod_ref()));
    assert_eq!(
        e.reporting_controller.as_deref(),
        Some("example.com/widgets")
    );
    assert_eq!(e.reporting_instance.as_deref(), Some("replica-0"));
    assert!(e.event_time.is_some());
    assert!(e.series.is_none());

    // Two repeats (another note is the same series): one Event, counted.
    for note in ["made a child", "made another child"] {
        recorder
            .publish(&spec(EventType::Normal, "Created", note), &pod_ref())
            .await
            .unwrap();
    }
    let now = events(&api).await;
    assert_eq!(now.len(), 1);
    assert_eq!(now[0].series.as_ref().map(|s| s.count), Some(3));

    // Another reason, or a warning: their own Events.
    recorder
        .publish(&spec(EventType::Warning, "Created", "odd"), &pod_ref())
        .await
        .unwrap();
    recorder
        .publish(&spec(EventType::Normal, "Deleted", "gone"), &pod_ref())
        .await
        .unwrap();
    assert_eq!(events(&api).await.len(), 3);
    assert_eq!(recorder.series(), 3);

    // The series' Event deleted: the next repeat starts a new one.
    let name = now[0].metadata.name.clone().unwrap();
    api.delete(&name, &DeleteParams::default()).await.unwrap();
    recorder
        .publish(&spec(EventType::Normal, "Created", "again"), &pod_ref())
        .await
        .unwrap();
    let after = events(&api).await;
    assert_eq!(after.len(), 3);
    assert!(
        after
            .iter()
            .all(|e| e.metadata.name.as_deref() != Some(name.as_str()))
    );

    // A zero window: every occurrence is its own Event, and nothing is followed.
    let eager = Recorder::new(client.clone(), reporter).with_series_window(Duration::ZERO);
    let mut cluster = pod_ref();
    cluster.namespace = None;
    cluster.kind = Some("Node".into());
    cluster.name = Some("node-1".into());
    for _ in 0..2 {
        eager
            .publish(&spec(EventType::Normal, "Ready", "up"), &cluster)
            .await
            .unwrap();
    }
    let default: Api<Event> = Api::namespaced(client, "default");
    assert_eq!(
        events(&default).await.len(),
        2,
        "cluster-scoped: in default"
    );
    server.shutdown().await;
}
