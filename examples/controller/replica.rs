//! One replica of the controller: its own kube client (its identity to the server), factory,
//! caches, `Client` and controller; with several, behind a leader election on a Lease, or
//! sharing the Apps by shard.

use std::sync::Arc;
use std::time::Duration;

use informers::apiserver::ApiServer;
use informers::informer::ShardBy;
use informers::k8s_openapi::api::core::v1::ConfigMap;
use informers::kube::{
    OWNER_UID_INDEX, UID_INDEX, owner_keys, owner_uid_index_func, uid_index_func,
};
use informers::kube_client;
use informers::leaderelection::{
    ElectionConfig, KubeLease, KubeLeases, LeaderElector, ShardConfig, ShardRunner, Timings,
};
use informers::prelude::*;
use informers::runtime::events::{Recorder, Reporter};
use informers::runtime::predicates::{finalizers_changed, generation_changed};
use informers::runtime::{Client, Controller, RuntimeError};

use crate::BoxError;
use crate::app::{App, CONTROLLER, GROUP};
use crate::reconcile::{Ctx, Tally, on_error, reconcile};

/// How the replicas of the controller share the work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// One replica, reconciling everything.
    Alone,
    /// Several, behind a leader election: one reconciles at a time.
    Elected,
    /// Several, sharing the Apps' hash space split into this many shards: each caches and
    /// reconciles its own.
    Sharded(u32),
}

pub(crate) struct Replica {
    pub(crate) name: String,
    pub(crate) factory: KubeInformerFactory,
    /// What it counted (kept by the final check past a crash).
    pub(crate) tally: Arc<Tally>,
    /// Its App cache.
    pub(crate) apps: Arc<SharedIndexInformer<App>>,
    /// Its shard assignment, when sharded.
    pub(crate) shards: Option<ShardRunner>,
    elector: Option<LeaderElector>,
    stop: CancellationToken,
    running: tokio::task::JoinHandle<Result<(), RuntimeError>>,
}

impl Replica {
    /// A replica on the simulator: its client sends its name as its token, the identity the
    /// simulator's faults address.
    pub(crate) fn on_simulator(
        server: &ApiServer,
        name: &str,
        mode: Mode,
    ) -> Result<Self, BoxError> {
        let mut config = kube_client::Config::new(server.url().parse()?);
        config.auth_info.token = Some(name.to_owned().into()); // who the server takes us for
        Self::start(kube_client::Client::try_from(config)?, name, mode, false)
    }

    /// Starts the informers and the controller: elected behind the Lease `app-controller`, or
    /// sharded on the Leases `app-controller-*`, as `mode` says.
    pub(crate) fn start(
        kube: kube_client::Client,
        name: &str,
        mode: Mode,
        verbose: bool,
    ) -> Result<Self, BoxError> {
        let factory = KubeInformerFactory::new(KubeSource::new(kube.clone()));
        let app_informer = factory.informer::<App>();
        // Sharded, a ConfigMap follows its App's shard (its controller owner's uid), so that a
        // replica caches the children of exactly the Apps it reconciles.
        let config_map_informer = match mode {
            Mode::Sharded(_) => factory
                .informer_with::<ConfigMap>(InformerOptions::default().shard_by(ShardBy::Owner)),
            Mode::Alone | Mode::Elected => factory.informer::<ConfigMap>(),
        };
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
        let apps = Arc::clone(&app_informer);
        let mut controller = Controller::new(app_informer)
            .owns(config_map_informer, move |cm: &ConfigMap| {
                owner_keys(&owners, cm)
            })
            .predicate(|old: &App, new: &App| {
                generation_changed(old, new) || finalizers_changed(old, new)
            })
            .observer(tally.clone())
            .concurrency(2);
        let (mut elector, mut shards) = (None, None);
        match mode {
            Mode::Alone => {}
            Mode::Elected => {
                let e = LeaderElector::new(
                    KubeLease::new(kube.clone(), "default", CONTROLLER),
                    ElectionConfig::new(name).timings(LEASE, DEADLINE, RETRY),
                )?;
                controller = controller.leader_election(e.clone());
                elector = Some(e);
            }
            Mode::Sharded(count) => {
                // The one builder call: the controller runs the assignment and follows it.
                let config = ShardConfig::new(CONTROLLER, name, count)
                    .timings(Timings::new(LEASE, DEADLINE, RETRY));
                let runner = ShardRunner::new(KubeLeases::new(kube.clone(), "default"), config)?;
                controller = controller.sharded(runner.clone());
                shards = Some(runner);
            }
        }
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
            apps,
            shards,
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

/// The Leases' timings (the election's, and the shards'): short, so that the example runs in
/// seconds; the defaults are 15 s, 10 s, 2 s.
const LEASE: Duration = Duration::from_secs(2);
const DEADLINE: Duration = Duration::from_millis(1200);
const RETRY: Duration = Duration::from_millis(300);

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
