//! Chaos convergence for the informers stack: seeded scenarios that churn pods on the API
//! server simulator while its faults fire at random, and the checks that the informers came
//! through with nothing lost.
//!
//! An informer promises one thing: whatever the network and the server do, its cache and its
//! handlers' views converge to the server's state. A [`Scenario`] is drawn from a `u64` seed —
//! the initial pods, a few hundred writes (creates, node moves, annotation changes, relabels in
//! and out of a label selector, deletes), the faults between them (dropped, torn and closed
//! watches, garbage lines, `ERROR` events of every kind, 429/5xx bursts, compaction, restarts
//! that lose the history, bookmarks off, slow streams) and the server's settings — so that a
//! failing seed replays the same schedule. [`run_seed`] runs one on a runtime of its own
//! against two informers over HTTP (kube-client → `KubeListerWatcher` → reflector →
//! DeltaFifo → `SharedIndexInformer`): one of every pod with the `namespace` and `node` indexes
//! and three handlers (plain, filtered, slow), one of the pods matching [`SELECTOR`] with one.
//! The informers read protobuf, or JSON only on one seed in four (`seed % 4 == 3`).
//! When the churn stops it checks:
//!
//! * **convergence**: each cache equals the server's state object by object, at the same
//!   resourceVersion (waited for, within [`SETTLE_BOUND`]), and the indexes agree;
//! * **replay**: each handler's notifications, replayed over an empty map, give exactly the
//!   cache (filtered for the filtered handler); every add, update and delete fits the view
//!   built so far and matches a write the server made; tombstones appear only for removals the
//!   informer missed, after a relist;
//! * **relists**: a [`Recording`] wrapper logs each list and how each watch ended; every list
//!   after the first follows a 410, a too-large version or an error that needs one;
//! * **encoding**: each informer read the encoding its seed chose: no protobuf response on a
//!   JSON-only seed, protobuf and no JSON on the others;
//! * **shutdown**: the informers stop, every handler worker is joined, and the runtime has no
//!   task left ([`run_seeds`] also checks that no `informer-` thread is left).
//!
//! The same seeds also drive a controller ([`controller`], [`run_controller_seed`]): an
//! `informer-runtime` reconciler over the pods that keeps one child ConfigMap `ns/p-info` per
//! pod (its node in `data.node`, owned by the pod's current UID), through the scenario's churn
//! and faults plus disturbances of its own drawn from the seed ([`ControllerPlan`]): children
//! drifted or deleted behind its back, orphans, second children, failed writes, latency. Each
//! reconcile checks that no other reconcile of its key runs and that both caches have synced;
//! once the churn stops, the world on the server must converge within [`SETTLE_BOUND`] (every
//! pod exactly its child, no ConfigMap of a pod UID that is gone), and the controller and the
//! informers must stop cleanly.
//!
//! The same controller also runs sharded ([`sharded`]): 3 to 5 replicas splitting the pods by
//! shard on Leases, killed, cut off from the server and joined mid-run, every reconcile in a
//! ledger checked for two replicas reconciling one object at once, in one process or with each
//! replica a process of its own.
//!
//! The suites run many seeds alike ([`seeds`]: [`run_suite`] over a [`SeedSuite`], into a
//! [`Summary`] of the suite's own tally).
//!
//! The `informer-chaos` binary runs thousands of seeds (`--controller` for the controller
//! scenario) and has a soak mode ([`soak()`]), which can run the simulator in a process of its
//! own ([`server_process`]): see `docs/reliability.md`.
//!
//! ```
//! use informer_chaos::{Scenario, run_seed};
//!
//! let scenario = Scenario::with_steps(7, 40); // seed 7, a short schedule
//! match run_seed(&scenario) {
//!     Ok(outcome) => println!("{} notifications, {} relists", outcome.notifications, outcome.relists),
//!     Err(failure) => panic!("{failure}"), // prints the seed and the replay command
//! }
//! ```
//!
//! ```
//! use informer_chaos::{Scenario, run_controller_seed};
//!
//! let scenario = Scenario::with_steps(7, 40);
//! match run_controller_seed(&scenario) {
//!     Ok(outcome) => println!("{} reconciles, {} retried", outcome.reconciles, outcome.errors_retried),
//!     Err(failure) => panic!("{failure}"), // replay: informer-chaos --controller --seed 7 --steps 40
//! }
//! ```

pub mod controller;
pub mod election;
pub mod journal;
pub mod record;
pub mod reinstall;
pub mod runner;
pub mod scenario;
pub mod seeds;
pub mod server_process;
pub mod sharded;
pub mod soak;
pub mod stack;

pub use crate::controller::{
    ControllerOutcome, ControllerPlan, ControllerTally, Disturbance, run_controller,
    run_controller_seed, run_controller_seeds,
};
pub use crate::election::ElectionPlan;
pub use crate::journal::{Journal, JournalOptions, Note, WriteLog};
pub use crate::record::{Call, CallLog, End, Recording, check_relists, justifies_relist};
pub use crate::reinstall::{
    AppStep, ReinstallOutcome, ReinstallPlan, reinstall_replay_command, run_reinstall,
};
pub use crate::runner::{
    Failure, InformersTally, Outcome, SETTLE_BOUND, Suite, controller_replay_command,
    replay_command, run, run_seed, run_seeds,
};
pub use crate::scenario::{DEFAULT_STEPS, Fault, Generator, Op, SELECTOR, Scenario, Step};
pub use crate::seeds::{SeedSuite, Summary, informer_threads, run_suite};
pub use crate::server_process::serve as serve_soak;
pub use crate::soak::{SoakOptions, SoakReport, soak};
