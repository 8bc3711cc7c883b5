//! Informers that come and go: one removed from a running factory stops with its consumers and
//! is created afresh on the next request, the others untouched; a resource the server does not
//! serve is reported, and can be left out of the wait for sync.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::{NotYet, Pods, Secrets, Source, objects};
use futures::StreamExt;
use informer::{HandlerOptions, HealthOptions, ResourceEventHandlerFuncs};
use informer_factory::{InformerOptions, SharedInformerFactory};

const LONG: Duration = Duration::from_secs(30);

/// How many lister-watchers the source made for `resource`.
fn made_for(factory: &SharedInformerFactory<Source>, resource: &str) -> usize {
    let made = factory.source().made();
    made.iter().filter(|m| m.resource == resource).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_informer_stops_its_consumers_and_is_created_afresh() {
    let factory = SharedInformerFactory::new(Source::with(objects()));
    let pods = factory.informer::<Pods>();
    let secrets = factory.informer::<Secrets>();
    let registration = pods
        .add_event_handler(ResourceEventHandlerFuncs::new(), HandlerOptions::new())
        .expect("registered");
    let mut subscription = pods.subscribe(HandlerOptions::new()).expect("subscribed");
    factory.start().expect("started");
    let report = factory.wait_for_cache_sync(Some(LONG)).await;
    assert!(report.all_synced(), "{report}");

    let removed = factory.remove::<Pods>(InformerOptions::new()).await;
    assert!(removed.expect("a clean stop"), "it was there");
    // Stopped by the time `remove` returns, its consumers with it.
    assert!(pods.is_stopped());
    assert!(registration.is_stopped());
    let ended =
        tokio::time::timeout(LONG, async { while subscription.next().await.is_some() {} }).await;
    assert!(ended.is_ok(), "the subscription's stream ends");
    // The factory holds it no more.
    assert_eq!(factory.informers().len(), 1);
    assert_eq!(factory.stats().len(), 1);
    assert_eq!(factory.health(&HealthOptions::default()).informers.len(), 1);
    // The other informer is untouched.
    assert!(secrets.has_synced() && !secrets.is_stopped());
    assert_eq!(secrets.lister().len(), 3);
    // A second removal finds nothing.
    let again = factory.remove::<Pods>(InformerOptions::new()).await;
    assert!(!again.expect("nothing to fail"));

    // The next request creates a new informer, which the next start runs and syncs anew.
    let fresh = factory.informer::<Pods>();
    assert!(!Arc::ptr_eq(&fresh, &pods));
    assert!(!fresh.has_started() && !fresh.has_synced());
    assert_eq!(factory.start().expect("started"), 1);
    let report = factory.wait_for_cache_sync(Some(LONG)).await;
    assert!(report.all_synced(), "{report}");
    assert_eq!(fresh.lister().len(), 3);
    assert_eq!(
        made_for(&factory, "Pods"),
        2,
        "a new lister-watcher, listed anew"
    );
    assert_eq!(made_for(&factory, "Secrets"), 1);
    factory.shutdown().await.expect("a clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_an_informer_never_started_or_after_shutdown_tells_its_consumers() {
    let factory = SharedInformerFactory::new(Source::with(objects()));
    let in_a = factory.informer_with::<Pods>(InformerOptions::new().namespace("a"));
    let registration = in_a
        .add_event_handler(ResourceEventHandlerFuncs::new(), HandlerOptions::new())
        .expect("registered");

    // By its handle; never started, it is stopped all the same.
    assert!(factory.remove_informer(&in_a).await.expect("a clean stop"));
    assert!(in_a.is_stopped() && registration.is_stopped());
    assert!(!registration.wait_for_sync().await, "it will never sync");
    assert!(factory.informers().is_empty());
    assert!(
        !factory
            .remove_informer(&in_a)
            .await
            .expect("nothing to fail")
    );
    assert_eq!(made_for(&factory, "Pods"), 1, "and it never listed");
    assert!(factory.source().made()[0].fake.requests().is_empty());

    // One started, then shut down with the factory: removed without a second wait.
    let secrets = factory.informer::<Secrets>();
    factory.start().expect("started");
    factory.shutdown().await.expect("a clean shutdown");
    assert!(secrets.is_stopped());
    let removed = factory.remove::<Secrets>(InformerOptions::new()).await;
    assert!(removed.expect("a clean stop"));
    assert!(factory.informers().is_empty());
}

#[tokio::test(start_paused = true)]
async fn waiting_for_the_served_informers_returns_while_one_is_not_served() {
    let factory = SharedInformerFactory::new(Source::with(objects()));
    let pods = factory.informer::<Pods>();
    let missing = factory.informer::<NotYet>();
    factory.start().expect("started");

    // No timeout: this returns only because the informer not served is not waited for.
    let report = factory.wait_for_cache_sync_served(None).await;
    assert!(report.all_served_synced(), "{report}");
    assert!(!report.all_synced(), "{report}");
    let not_served: Vec<_> = report.not_served().collect();
    assert_eq!(not_served.len(), 1, "{report}");
    assert!(not_served[0].resource.ends_with("NotYet"), "{report}");
    assert!(
        report.to_string().contains("NotYet(all): not served"),
        "{report}"
    );
    assert!(pods.has_synced() && !missing.has_synced() && !missing.is_stopped());

    // The plain wait waits for it, and reports it not served when its time is up.
    let report = factory
        .wait_for_cache_sync(Some(Duration::from_secs(30)))
        .await;
    assert!(!report.all_synced() && report.not_served().count() == 1);

    // Live, not ready; ready but for the resource not served.
    let health = factory.health(&HealthOptions::default());
    assert!(health.is_live(), "{health}");
    assert!(!health.is_ready(), "{health}");
    assert!(health.is_ready_served(), "{health}");
    assert_eq!(health.not_served().count(), 1, "{health}");
    factory.shutdown().await.expect("a clean shutdown");
}

/// Requests racing a removal get the old informer or one new one, never two new ones: the
/// factory holds one informer per key throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_racing_a_removal_share_one_new_informer() {
    let factory = Arc::new(SharedInformerFactory::new(Source::with(objects())));
    let first = factory.informer::<Pods>();
    factory.start().expect("started");
    let requesters: Vec<_> = (0..4)
        .map(|_| {
            let factory = Arc::clone(&factory);
            tokio::spawn(async move {
                let mut got = Vec::new();
                for _ in 0..200 {
                    got.push(factory.informer::<Pods>());
                    tokio::task::yield_now().await;
                }
                got
            })
        })
        .collect();
    let removed = factory.remove::<Pods>(InformerOptions::new()).await;
    assert!(removed.expect("a clean stop"));
    let mut got = Vec::new();
    for requester in requesters {
        got.extend(requester.await.expect("no panic"));
    }
    let now = factory.informer::<Pods>();
    assert_eq!(factory.informers().len(), 1, "one informer per key");
    assert!(
        got.iter()
            .all(|i| Arc::ptr_eq(i, &first) || Arc::ptr_eq(i, &now)),
        "every request got the old informer or the one new one"
    );
    assert!(first.is_stopped() && !now.is_stopped());
    assert_eq!(factory.start().expect("started"), 1);
    let report = factory.wait_for_cache_sync(Some(LONG)).await;
    assert!(report.all_synced(), "{report}");
    factory.shutdown().await.expect("a clean shutdown");
}
