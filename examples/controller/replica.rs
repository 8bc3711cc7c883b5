//! One replica of the controller: its own kube client (its identity to the server), factory,
//! caches, `Client` and controller; with several, behind a leader election on a Lease.

use std::sync::Arc;
use std::time::Duration;

use informers::apiserver::ApiServer;
use informers::k8s_openapi::api::core::v1::ConfigMap;
use informers::kube::{
    OWNER_UID_INDEX, UID_INDEX, owner_keys, owner_uid_index_func, uid_index_func,
};
use informers::kube_client;
use informers::leaderelection::{ElectionConfig, KubeLease, LeaderElector};
use informers::prelude::*;
use informers::runtime::events::{Recorder, Reporter};
use informers::runtime::predicates::{finalizers_changed, generation_changed};
use informers::runtime::{Client, Controller, RuntimeError};

use crate::BoxError;
use crate::app::{App, CONTROLLER, GROUP};
use crate::reconcile::{Ctx, Tally, on_error, reconcile};

pub(crate) struct Replica {
    pub(crate) name: String,
    pub(crate) factory: KubeInformerFactory,
    /// What it counted (kept by the final check past a crash).
    pub(crate) tally: Arc<Tally>,
    elector: Option<LeaderElector>,
    stop: CancellationToken,
    running: tokio::task::JoinHandle<Result<(), RuntimeError>>,
}

impl Replica {
    /// A replica on the simulator: its client sends its name as its token, the identity the
    /// simulator's faults address.
    pub(crate) fn on_simulator(server: &ApiServer, name: &str, ha: bool) -> Result<Self, BoxError> {
        let mut config = kube_client::Config::new(server.url().parse()?);
        config.auth_info.token = Some(name.to_owned().into()); // who the server takes us for
        Self::start(kube_client::Client::try_from(config)?, name, ha, false)
    }

    /// Starts the informers and the controller; with `ha`, behind the Lease `app-controller`.
    pub(crate) fn start(
        kube: kube_client::Client,
        name: &str,
        ha: bool,
        verbose: bool,
    ) -> Result<Self, BoxError> {
        let factory = KubeInformerFactory::new(KubeSource::new(kube.clone()));
        let app_informer = factory.informer::<App>();
        let config_map_informer = factory.informer::<ConfigMap>();
        app_informer.add_index(UID_INDEX, uid_index_func::<App>())?;
        config_map_informer.add_index(OWNER_UID_INDEX, owner_uid_index_func::<ConfigMap>())?;
        // The reconcile reads Apps and ConfigMaps from these caches and writes through the
        // client, which records each write for the key's next reconcile to wait for.
        let client = Client::new(kube.clone())
            .with_cache(Arc::clone(&app_informer))
            .with_cache(Arc::clone(&config_map_informer));
        factory.start()?;

        // The controller: Apps, owning ConfigMaps (a ConfigMap's change wakes its App). An App's
        // update is reconciled when its spec (generation) or its finalizers changed: not for a
        // change of its labels, nor for its status (which takes no new generation). The
        // finalizers count too, or the reconcile after the finalizer is added would never come.
        // Each reconcile waits until the caches show what the key's previous one wrote
        // (`read_your_writes`, on by default, up to 5 s); the tally counts those waits.
        let tally = Arc::new(Tally::default());
        let owners = app_informer.lister();
        let mut controller = Controller::new(app_informer)
            .owns(config_map_informer, move |cm: &ConfigMap| {
                owner_keys(&owners, cm)
            })
            .predicate(|old: &App, new: &App| {
                generation_changed(old, new) || finalizers_changed(old, new)
            })
            .observer(tally.clone())
            .concurrency(2);
        let elector = if ha {
            let elector = elector(&kube, name)?;
            controller = controller.leader_election(elector.clone());
            Some(elector)
        } else {
            None
        };
        let recorder = Recorder::new(
            kube,
            Reporter {
                controller: format!("{GROUP}/{CONTROLLER}"),
                instance: Some(name.to_owned()),
            },
        );
        let ctx = Arc::new(Ctx {
            client,
            recorder,
            tally: Arc::clone(&tally),
            verbose,
        });
        let stop = CancellationToken::new();
        let replica = name.to_owned();
        let running = tokio::spawn(controller.run(
            stop.clone(),
            ctx,
            reconcile,
            move |request, error, _| on_error(&replica, request, error),
        ));
        Ok(Self {
            name: name.to_owned(),
            factory,
            tally,
            elector,
            stop,
            running,
        })
    }

    pub(crate) fn leads(&self) -> bool {
        self.elector.as_ref().is_some_and(LeaderElector::is_leader)
    }

    /// A graceful stop: reconciles finish, the lease is released, the informers stop.
    pub(crate) async fn stop(self) -> Result<(), BoxError> {
        self.stop.cancel();
        self.running.await??;
        self.factory.shutdown().await?;
        Ok(())
    }

    /// A crash: everything of the replica is dropped at once, nothing is released.
    pub(crate) async fn crash(self) -> Result<(), BoxError> {
        self.running.abort();
        let _ = self.running.await;
        self.factory.shutdown().await?;
        Ok(())
    }
}

/// The leader election of `name`, on the Lease `default/app-controller`. Short timings, so
/// that the example runs in seconds; the defaults are 15 s, 10 s, 2 s.
fn elector(kube: &kube_client::Client, name: &str) -> Result<LeaderElector, BoxError> {
    let lease = KubeLease::new(kube.clone(), "default", CONTROLLER);
    let timings = ElectionConfig::new(name).timings(
        Duration::from_secs(2),
        Duration::from_millis(1200),
        Duration::from_millis(300),
    );
    Ok(LeaderElector::new(lease, timings)?)
}

/// Waits (up to 30 s) until one of `replicas` other than `not` leads; returns its index.
pub(crate) async fn new_leader(replicas: &[Replica], not: Option<usize>) -> Result<usize, String> {
    tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            if let Some(i) = (0..replicas.len()).find(|&i| Some(i) != not && replicas[i].leads()) {
                return i;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .map_err(|_| "no replica took the lead".to_owned())
}
