//! Reconciling only while leading: two replicas' controllers over one lease; whichever leads
//! reconciles, the other waits with its caches warm; when the leader is cut off from the lease,
//! it stops reconciling and the other takes over, reconciling every object once more; no
//! reconcile of a replica ever starts outside its term.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use informer::SharedIndexInformer;
use informer_leaderelection::{ElectionConfig, LeaderElector, MemoryLease};
use informer_reflector::{FakeListerWatcher, ListPage, WatchEvent, WatchStep};
use informer_runtime::{Action, Controller, Target};
use informer_store::{FnIdentity, key_func};
use informer_testing::eventually;
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

const LONG: Duration = Duration::from_secs(30);

/// A candidate on `lease` (this handle of it) with short timings (1 s lease, 600 ms deadline,
/// 100 ms retry).
fn elector(lease: &MemoryLease, name: &str) -> LeaderElector {
    let config = ElectionConfig::new(name).timings(
        Duration::from_secs(1),
        Duration::from_millis(600),
        Duration::from_millis(100),
    );
    LeaderElector::new(lease.clone(), config).expect("valid timings")
}

/// Runs `elector`'s election until `stop`.
fn run_elector(elector: &LeaderElector, stop: &CancellationToken) -> tokio::task::JoinHandle<()> {
    let (elector, stop) = (elector.clone(), stop.clone());
    tokio::spawn(async move { elector.run(stop).await })
}

/// Waits for a stopped controller (within [`LONG`]) and its informer.
async fn join_stopped(
    reconciling: tokio::task::JoinHandle<Result<(), informer_runtime::RuntimeError>>,
    informer: tokio::task::JoinHandle<()>,
) {
    tokio::time::timeout(LONG, reconciling)
        .await
        .expect("stops in time")
        .expect("no panic")
        .expect("runs");
    informer.await.expect("no panic");
}

/// One replica: its own informer over the same objects, its elector, what it reconciled.
struct Replica {
    name: &'static str,
    elector: LeaderElector,
    lease: MemoryLease,
    informer: Arc<SharedIndexInformer<String>>,
    source: Arc<FakeListerWatcher<String>>,
    /// Keys reconciled, in order, each with the term it started in.
    reconciled: Arc<Mutex<Vec<(String, u64)>>>,
    outside_term: Arc<AtomicBool>,
}

impl Replica {
    fn new(name: &'static str, lease: &MemoryLease, objects: &[&str]) -> Self {
        let source = Arc::new(FakeListerWatcher::<String>::new());
        source.push_list(ListPage::new(
            objects.iter().map(|o| Arc::new(o.to_string())).collect(),
            "1",
        ));
        let informer = Arc::new(SharedIndexInformer::new(
            Arc::clone(&source),
            FnIdentity::new(key_func(|s: &String| Ok(s.clone()))),
        ));
        let lease = lease.handle();
        let elector = elector(&lease, name);
        Self {
            name,
            elector,
            lease,
            informer,
            source,
            reconciled: Arc::default(),
            outside_term: Arc::default(),
        }
    }

    fn start(&self, stop: &CancellationToken) -> Vec<tokio::task::JoinHandle<()>> {
        let informer = {
            let (i, s) = (Arc::clone(&self.informer), stop.clone());
            tokio::spawn(async move { i.run(s).await.expect("informer runs") })
        };
        let controller = Controller::new(Arc::clone(&self.informer))
            .concurrency(2)
            .leader_election(self.elector.clone());
        let ctx = Arc::new((
            self.elector.clone(),
            Arc::clone(&self.reconciled),
            Arc::clone(&self.outside_term),
        ));
        let reconciling = tokio::spawn({
            let stop = stop.clone();
            async move {
                controller
                    .run(
                        stop,
                        ctx,
                        |request, ctx| async move {
                            let (elector, reconciled, outside) = &*ctx;
                            match elector.current_term() {
                                Some(term) => {
                                    if let Target::Live(_) = request.target {
                                        reconciled
                                            .lock()
                                            .push((request.key.to_string(), term.number));
                                    }
                                }
                                None => outside.store(true, Ordering::SeqCst),
                            }
                            Ok::<_, std::convert::Infallible>(Action::await_change())
                        },
                        |_, _, _| Action::backoff(),
                    )
                    .await
                    .expect("the controller runs");
            }
        });
        vec![informer, reconciling]
    }

    fn keys_reconciled(&self) -> Vec<String> {
        let mut keys: Vec<_> = self
            .reconciled
            .lock()
            .iter()
            .map(|(k, _)| k.clone())
            .collect();
        keys.sort();
        keys.dedup();
        keys
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_leader_reconciles_and_a_successor_takes_over_from_warm_caches() {
    let objects = ["a", "b", "c"];
    let lease = MemoryLease::new();
    let replicas = [
        Replica::new("one", &lease, &objects),
        Replica::new("two", &lease, &objects),
    ];
    let stop = CancellationToken::new();
    let tasks: Vec<_> = replicas.iter().flat_map(|r| r.start(&stop)).collect();

    eventually("a leader reconciled every object", || {
        replicas
            .iter()
            .any(|r| r.elector.is_leader() && r.keys_reconciled() == objects)
    })
    .await;
    let first = replicas
        .iter()
        .position(|r| r.elector.is_leader())
        .expect("a leader");
    let (leader, standby) = (&replicas[first], &replicas[1 - first]);
    assert!(
        standby.reconciled.lock().is_empty(),
        "the standby reconciles nothing"
    );
    assert!(standby.informer.has_synced(), "the standby's cache is warm");

    // The leader is cut off from the lease: it stops reconciling; the standby takes over and
    // reconciles everything, from the cache it kept (no new list).
    let before = leader.reconciled.lock().len();
    leader.lease.set_reachable(false);
    eventually("the standby leads and reconciled every object", || {
        standby.elector.is_leader() && standby.keys_reconciled() == objects
    })
    .await;
    assert!(!leader.elector.is_leader());
    let lists = |r: &Replica| r.source.requests().iter().filter(|q| q.is_list()).count();
    assert_eq!(lists(standby), 1, "no relist on taking over");
    assert_eq!(
        leader.reconciled.lock().len(),
        before,
        "the replica that lost the lease reconciled nothing more"
    );

    // Healed, the old leader stays a standby while the lease is renewed.
    leader.lease.set_reachable(true);
    eventually("the old leader observes the new one", || {
        leader.elector.status().leader.as_deref() == Some(standby.name)
    })
    .await;
    assert!(!leader.elector.is_leader());

    stop.cancel();
    for task in tasks {
        tokio::time::timeout(LONG, task)
            .await
            .expect("stops in time")
            .expect("no panic");
    }
    for r in &replicas {
        assert!(
            !r.outside_term.load(Ordering::SeqCst),
            "{} reconciled outside its term",
            r.name
        );
    }
    assert_eq!(
        lease.record().expect("kept").holder,
        None,
        "released on stop"
    );
}

/// Leadership lost mid-reconcile cancels the reconcile at once; the key is reconciled again in
/// the next term (nothing is stuck as "processing").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconcile_under_way_is_cancelled_when_the_term_ends_and_redone_later() {
    let lease = MemoryLease::new();
    let replica = Replica::new("one", &lease, &["slow"]);
    let stop = CancellationToken::new();
    let informer = {
        let (i, s) = (Arc::clone(&replica.informer), stop.clone());
        tokio::spawn(async move { i.run(s).await.expect("informer runs") })
    };
    let started = Arc::new(AtomicUsize::new(0));
    let finished = Arc::new(AtomicUsize::new(0));
    let controller =
        Controller::new(Arc::clone(&replica.informer)).leader_election(replica.elector.clone());
    let ctx = Arc::new((
        Arc::clone(&started),
        Arc::clone(&finished),
        replica.elector.clone(),
    ));
    let reconciling = tokio::spawn(controller.run(
        stop.clone(),
        ctx,
        |_request, ctx| async move {
            let (started, finished, elector) = &*ctx;
            let term = elector.current_term().expect("inside a term");
            started.fetch_add(1, Ordering::SeqCst);
            if term.number == 1 {
                // Hangs until cancelled.
                std::future::pending::<()>().await;
            }
            finished.fetch_add(1, Ordering::SeqCst);
            Ok::<_, std::convert::Infallible>(Action::await_change())
        },
        |_, _, _| Action::backoff(),
    ));
    eventually("the first reconcile started", || {
        started.load(Ordering::SeqCst) == 1
    })
    .await;
    replica.lease.set_reachable(false);
    eventually("leadership lost", || !replica.elector.is_leader()).await;
    replica.lease.set_reachable(true);
    eventually("redone in the second term", || {
        finished.load(Ordering::SeqCst) == 1
    })
    .await;
    assert_eq!(started.load(Ordering::SeqCst), 2);
    assert_eq!(replica.elector.status().term, 2);
    stop.cancel();
    join_stopped(reconciling, informer).await;
}

/// A crash (the controller's task aborted) ends its election with it: the replica stops
/// leading and renewing, so another can take over once the lease expires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aborting_the_controller_ends_its_election() {
    let lease = MemoryLease::new();
    let replica = Replica::new("one", &lease, &["a"]);
    let stop = CancellationToken::new();
    let tasks = replica.start(&stop);
    eventually("leading and reconciled", || {
        replica.elector.is_leader() && !replica.reconciled.lock().is_empty()
    })
    .await;
    tasks[1].abort();
    eventually("not leading once aborted", || !replica.elector.is_leader()).await;
    let writes = lease.writes();
    let other = elector(&lease.handle(), "two");
    let running = run_elector(&other, &stop);
    eventually("the other replica takes over", || other.is_leader()).await;
    assert!(lease.writes() > writes);
    assert_eq!(lease.record().expect("held").holder.as_deref(), Some("two"));
    stop.cancel();
    running.await.expect("no panic");
    for task in tasks {
        let _ = task.await;
    }
}

/// A replica standing by queues nothing however much changes (a term queues every cached
/// object when it begins), and remembers only the latest deletions, up to its limit: its
/// memory stays bounded while it waits. When it leads, it reconciles every cached object and
/// the deletions it remembered, with their last known states, and not the older ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_queues_nothing_and_remembers_only_its_latest_deletions() {
    const GONE: usize = 20;
    const LIMIT: usize = 5;
    let lease = MemoryLease::new();
    // Another replica holds the lease from the start.
    let holder = elector(&lease.handle(), "holder");
    let (holder_stop, stop) = (CancellationToken::new(), CancellationToken::new());
    let holding = run_elector(&holder, &holder_stop);
    holder.leading().await;

    let gone: Vec<String> = (0..GONE).map(|i| format!("gone-{i:02}")).collect();
    let mut listed: Vec<&str> = vec!["keep-0", "keep-1"];
    listed.extend(gone.iter().map(String::as_str));
    let replica = Replica::new("standby", &lease, &listed);
    let mut steps: Vec<WatchStep<String>> = gone
        .iter()
        .enumerate()
        .map(|(i, g)| {
            WatchStep::Event(WatchEvent::deleted(
                Arc::new(g.clone()),
                format!("{}", i + 2),
            ))
        })
        .collect();
    steps.push(WatchStep::Event(WatchEvent::modified(
        Arc::new("keep-0".into()),
        "30",
    )));
    steps.push(WatchStep::Event(WatchEvent::added(
        Arc::new("late".into()),
        "31",
    )));
    steps.push(WatchStep::Hang);
    replica.source.push_watch(steps);
    // The controller (its handler, standing by, with its limit) before the informer runs: a
    // handler added later would get the cache's objects, not the changes.
    let controller = Controller::new(Arc::clone(&replica.informer))
        .leader_election(replica.elector.clone())
        .standby_deletions(LIMIT);
    let informer = {
        let (i, s) = (Arc::clone(&replica.informer), stop.clone());
        tokio::spawn(async move { i.run(s).await.expect("informer runs") })
    };
    let queue = controller.queue().clone();
    // Per key: whether its reconcile saw it live, or deleted with its last known state.
    let seen: Arc<Mutex<Vec<(String, &'static str)>>> = Arc::default();
    let reconciling = tokio::spawn(controller.run(
        stop.clone(),
        Arc::clone(&seen),
        |request, seen| async move {
            let how = match &request.target {
                Target::Live(_) => "live",
                Target::Deleted {
                    last_known: Some(_),
                } => "deleted, last known",
                Target::Deleted { last_known: None } => "deleted, unknown",
            };
            seen.lock().push((request.key.to_string(), how));
            Ok::<_, std::convert::Infallible>(Action::await_change())
        },
        |_, _, _| Action::backoff(),
    ));

    // Every notification handled: the list (22 adds), 20 deletions, an update, an add.
    let handled = || {
        replica
            .informer
            .stats()
            .handlers
            .iter()
            .map(|h| h.delivered())
            .sum::<usize>()
    };
    eventually("the standby handled every change", || {
        handled() == 2 + GONE + GONE + 2
    })
    .await;
    assert_eq!(queue.len(), 0, "a standby queues nothing");
    assert!(seen.lock().is_empty());
    assert!(!replica.elector.is_leader());

    // The holder steps down: the standby leads.
    holder_stop.cancel();
    holding.await.expect("no panic");
    let mut expected: Vec<(String, &str)> = ["keep-0", "keep-1", "late"]
        .iter()
        .map(|k| (k.to_string(), "live"))
        .collect();
    expected.extend(
        gone[GONE - LIMIT..]
            .iter()
            .map(|g| (g.clone(), "deleted, last known")),
    );
    expected.sort();
    eventually(
        "the new leader reconciled its cache and remembered deletions",
        || seen.lock().len() >= expected.len(),
    )
    .await;
    let mut got = seen.lock().clone();
    got.sort();
    assert_eq!(
        got, expected,
        "the older deletions are forgotten, not reconciled"
    );

    stop.cancel();
    join_stopped(reconciling, informer).await;
}

/// A new term sees the whole world: a child whose owner is gone, cached before the term (its
/// initial add came while the replica stood by, and was dropped), wakes its owner when the term
/// begins, as it does without an election.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_term_queues_the_owners_of_the_children_cached() {
    let owners = Arc::new(FakeListerWatcher::<String>::new());
    owners.push_list(ListPage::new(Vec::new(), "1"));
    owners.push_watch(vec![WatchStep::Hang]);
    let children = Arc::new(FakeListerWatcher::<String>::new());
    // "gone/child": a child of owner "gone", which no longer exists.
    children.push_list(ListPage::new(vec![Arc::new("gone/child".to_string())], "1"));
    children.push_watch(vec![WatchStep::Hang]);
    let identity = || FnIdentity::new(key_func(|s: &String| Ok(s.clone())));
    let main = Arc::new(SharedIndexInformer::new(Arc::clone(&owners), identity()));
    let child = Arc::new(SharedIndexInformer::new(Arc::clone(&children), identity()));
    let lease = MemoryLease::new();
    let stop = CancellationToken::new();
    let running: Vec<_> = [Arc::clone(&main), Arc::clone(&child)]
        .into_iter()
        .map(|i| {
            let stop = stop.clone();
            tokio::spawn(async move { i.run(stop).await.expect("informer runs") })
        })
        .collect();
    let reconciled = Arc::new(Mutex::new(Vec::<(String, bool)>::new()));
    let controller = Controller::new(Arc::clone(&main))
        .owns(Arc::clone(&child), |c: &String| {
            c.split_once('/')
                .map(|(owner, _)| owner.to_string())
                .into_iter()
                .collect()
        })
        .leader_election(elector(&lease, "a"));
    let done = tokio::spawn(controller.run(
        stop.clone(),
        Arc::clone(&reconciled),
        |request, seen| async move {
            let live = matches!(request.target, Target::Live(_));
            seen.lock().push((request.key.to_string(), live));
            Ok::<_, std::convert::Infallible>(Action::await_change())
        },
        |_, _, _| Action::backoff(),
    ));
    eventually("the gone owner reconciled", || {
        reconciled.lock().contains(&("gone".to_string(), false))
    })
    .await;
    stop.cancel();
    tokio::time::timeout(LONG, done)
        .await
        .expect("stops in time")
        .unwrap()
        .unwrap();
    for task in running {
        task.await.unwrap();
    }
}
