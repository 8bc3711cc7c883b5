//! The read-your-own-writes waits as metrics: a controller that writes through `Client` while
//! the simulator's watch cache holds every change back waits for its write at its next
//! reconcile, times out, and runs on a stale read; then, the cache let go, a wait that catches
//! up. Both are counted by result, and timed.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{assert_openmetrics, sample};
use informer_apiserver::{ApiServer, Config, Faults};
use informer_kube::{KubeInformerFactory, KubeSource};
use informer_metrics::Metrics;
use informer_runtime::{Action, Client, ClientError, Controller, Target};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::PostParams;
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(20);
/// Longer than the test: what is committed while it is set reaches the cache only when lowered.
const HELD: Duration = Duration::from_secs(3600);

async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    tokio::time::timeout(WAIT, async {
        while !cond() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("timed out waiting for: {what}"));
}

fn config_map(name: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("demo".into()),
            ..Default::default()
        },
        ..Default::default()
    }
}

struct Ctx {
    client: Client,
    faults: Faults,
    reconciles: AtomicUsize,
}

/// Reconciles of `demo/owner`: the first writes `demo/written` with the cache held back and
/// asks for the next at once; the second (run on a stale read, the wait timed out) lets the
/// cache go and writes `demo/written-2`; the third waits for that one and catches up.
async fn reconcile(
    request: informer_runtime::Request<ConfigMap>,
    ctx: Arc<Ctx>,
) -> Result<Action, ClientError> {
    // Only the owner is reconciled: the written config map writes nothing, awaits nothing.
    let Target::Live(_) = &request.target else {
        return Ok(Action::await_change());
    };
    if &*request.key != "demo/owner" {
        return Ok(Action::await_change());
    }
    match ctx.reconciles.fetch_add(1, Ordering::SeqCst) {
        0 => {
            ctx.faults.set_cache_delay(HELD);
            let written = config_map("written");
            ctx.client.create(&PostParams::default(), &written).await?;
            Ok(Action::requeue(Duration::from_millis(1)))
        }
        1 => {
            ctx.faults.set_cache_delay(Duration::ZERO);
            let second = config_map("written-2");
            ctx.client.create(&PostParams::default(), &second).await?;
            Ok(Action::requeue(Duration::from_millis(1)))
        }
        _ => Ok(Action::await_change()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waits_for_writes_are_counted_by_result_and_timed() {
    let server = ApiServer::start(Config::for_tests(Duration::from_millis(100)))
        .await
        .expect("server starts");
    let mut config = kube::Config::new(server.url().parse().unwrap());
    config.default_retry = false;
    let kube = kube::Client::try_from(config).unwrap();
    server.create(&config_map("owner")).unwrap();
    let factory = KubeInformerFactory::new(KubeSource::new(kube.clone()));
    let config_maps = factory.informer::<ConfigMap>();
    factory.start().unwrap();

    let metrics = Metrics::new();
    let ctx = Arc::new(Ctx {
        client: Client::new(kube).with_cache(Arc::clone(&config_maps)),
        faults: server.faults(),
        reconciles: AtomicUsize::new(0),
    });
    let controller = Controller::new(Arc::clone(&config_maps))
        .read_your_writes(Duration::from_millis(200))
        .observer(metrics.reconcile_observer("writer"));
    let stop = CancellationToken::new();
    let running = tokio::spawn(controller.run(
        stop.clone(),
        Arc::clone(&ctx),
        reconcile,
        |_, _, _| Action::requeue(Duration::from_secs(3600)),
    ));

    let series = |result: &str| {
        format!(
            "controller_runtime_read_your_writes_waits_total{{controller=\"writer\",result=\"{result}\"}}"
        )
    };
    eventually("a timed-out wait, then one that caught up", || {
        let text = metrics.encode();
        sample(&text, &series("timed_out")) == Some(1.0)
            && sample(&text, &series("caught_up")) == Some(1.0)
    })
    .await;
    let text = metrics.encode();
    assert_openmetrics(&text);
    assert_eq!(
        sample(
            &text,
            "controller_runtime_read_your_writes_wait_seconds_count{controller=\"writer\"}"
        ),
        Some(2.0)
    );
    // The timed-out wait lasted its bound at least.
    let waited = sample(
        &text,
        "controller_runtime_read_your_writes_wait_seconds_sum{controller=\"writer\"}",
    )
    .expect("the waits' sum");
    assert!(waited >= 0.2, "{waited} s waited");
    assert_eq!(sample(&text, &series("not_comparable")), None);

    stop.cancel();
    running.await.expect("no panic").expect("runs");
    factory.shutdown().await.unwrap();
    server.shutdown().await;
}
