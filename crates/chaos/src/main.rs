//! `informer-chaos`: seeded chaos convergence runs of the informers stack, and a soak mode.
//!
//! ```sh
//! cargo run --release -p informer-chaos -- --seeds 1000          # seeds 0..1000
//! cargo run --release -p informer-chaos -- --seed 417            # replay one seed
//! cargo run --release -p informer-chaos -- --controller --seeds 500 # the controller scenario
//! cargo run --release -p informer-chaos -- --controller --seed 31  # replay one of its seeds
//! cargo run --release -p informer-chaos -- --sharded --seeds 50 --steps 150 # sharded replicas
//! cargo run --release -p informer-chaos -- --sharded --processes --seeds 5 --steps 150
//! cargo run --release -p informer-chaos -- --reinstall --seeds 100 --steps 150 # CRDs come, go
//! cargo run --release -p informer-chaos -- --soak --duration 180 # 100,000 pods for 3 minutes
//! cargo run --release -p informer-chaos -- --soak --server-process # the simulator apart
//! ```

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use informer_chaos::sharded::ShardedTally;
use informer_chaos::sharded::process::{ReplicaArgs, run_sharded_processes, serve_replica};
use informer_chaos::{
    ControllerTally, DEFAULT_STEPS, InformersTally, Scenario, SeedSuite, SoakOptions,
    reinstall_replay_command, run_reinstall, run_suite, serve_soak, soak,
};

/// Seeded chaos convergence runs of the informers stack against the API server simulator.
#[derive(Parser, Debug)]
#[command(name = "informer-chaos", about)]
struct Args {
    /// How many seeds to run, from --first-seed on.
    #[arg(long, default_value_t = 100)]
    seeds: u64,
    /// The first seed of a --seeds run.
    #[arg(long, default_value_t = 0)]
    first_seed: u64,
    /// Run this one seed (replays a failure), with its problems printed in full.
    #[arg(long, conflicts_with_all = ["seeds", "first_seed"])]
    seed: Option<u64>,
    /// Steps per scenario (writes, faults and pauses).
    #[arg(long, default_value_t = DEFAULT_STEPS)]
    steps: usize,
    /// Seeds run at once [default: the number of CPUs].
    #[arg(long)]
    jobs: Option<usize>,
    /// Run the controller scenario: a reconciler keeping one child ConfigMap per pod through
    /// the seeds' churn and faults and disturbances of its own, checked for convergence.
    #[arg(long, conflicts_with = "soak")]
    controller: bool,
    /// Run the sharded scenario: the controller as 3 to 5 replicas splitting the pods into
    /// shards on Leases, replicas killed, cut off and joined; checked for convergence and for
    /// no two replicas reconciling one object at once.
    #[arg(long, conflicts_with_all = ["soak", "controller"])]
    sharded: bool,
    /// With --sharded: each replica in a process of its own (this binary, re-run with
    /// --sharded-replica), killed with SIGKILL; one seed at a time.
    #[arg(long, requires = "sharded")]
    processes: bool,
    /// The replica side of --processes.
    #[arg(long, hide = true, value_name = "SPEC")]
    sharded_replica: Option<String>,
    /// Run the custom-resource scenario: a CRD deleted and installed again between writes of
    /// its objects and faults, a factory informer of it checked for convergence (one seed at a
    /// time).
    #[arg(long, conflicts_with_all = ["soak", "controller"])]
    reinstall: bool,
    /// Soak mode: one long run at volume instead of seeds.
    #[arg(long)]
    soak: bool,
    /// Soak: seconds of churn.
    #[arg(long, default_value_t = 180.0)]
    duration: f64,
    /// Soak: pods created before the informers start.
    #[arg(long, default_value_t = 100_000)]
    objects: usize,
    /// Soak: writes per second while churning.
    #[arg(long, default_value_t = 2_000)]
    rate: u32,
    /// Soak: writes between two faults.
    #[arg(long, default_value_t = 6_000)]
    fault_every: u64,
    /// Soak: the seed of the churn and fault choices.
    #[arg(long, default_value_t = 1)]
    soak_seed: u64,
    /// Soak: microseconds the slow handler sleeps per notification. Every relist hands each
    /// handler one update per cached object; a slow handler falls behind its bounded buffer and
    /// coalesces per key until it catches up.
    #[arg(long, default_value_t = 10)]
    slow_handler_us: u64,
    /// Soak: run the simulator, the churn and the faults in a process of their own (this
    /// binary, re-run with --soak-server), so that this process holds the informers alone and
    /// its peak RSS is theirs.
    #[arg(long)]
    server_process: bool,
    /// The server side of --server-process: the simulator, driven over stdin and stdout.
    #[arg(long, hide = true)]
    soak_server: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let Some(spec) = &args.sharded_replica {
        let served = ReplicaArgs::parse(spec).and_then(|replica| serve_replica(&replica));
        return match served {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("sharded replica: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let server_process = if args.server_process {
        match std::env::current_exe() {
            Ok(exe) => Some(exe),
            Err(e) => {
                eprintln!("--server-process: this executable's path: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        None
    };
    let options = SoakOptions {
        objects: args.objects,
        duration: Duration::from_secs_f64(args.duration.max(0.0)),
        rate: args.rate,
        fault_every: args.fault_every.max(1),
        seed: args.soak_seed,
        slow_handler: Duration::from_micros(args.slow_handler_us),
        server_process,
    };
    if args.soak_server {
        return match serve_soak(&options) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("soak server: {e}");
                ExitCode::FAILURE
            }
        };
    }
    if args.soak {
        let report = soak(&options);
        println!("{report}");
        return if report.ok() {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        };
    }
    let seeds: Vec<u64> = match args.seed {
        Some(seed) => vec![seed],
        None => (args.first_seed..args.first_seed.saturating_add(args.seeds)).collect(),
    };
    if args.reinstall {
        return run_reinstalls(&seeds, args.steps, args.seed.is_some());
    }
    let jobs = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, usize::from));
    let scenarios: Vec<Scenario> = seeds
        .iter()
        .map(|&seed| Scenario::with_steps(seed, args.steps))
        .collect();
    let replaying = args.seed.is_some();
    if args.sharded && args.processes {
        run_in_processes(&scenarios, args.seed.is_some())
    } else if args.sharded {
        run_batch::<ShardedTally>(scenarios, jobs, args.steps, replaying)
    } else if args.controller {
        run_batch::<ControllerTally>(scenarios, jobs, args.steps, replaying)
    } else {
        run_batch::<InformersTally>(scenarios, jobs, args.steps, replaying)
    }
}

/// Runs `scenarios` in the suite `T` on `jobs` threads and prints the summary, each failure as
/// it comes, and each seed that passed when `replaying` one.
fn run_batch<T: SeedSuite>(
    scenarios: Vec<Scenario>,
    jobs: usize,
    steps: usize,
    replaying: bool,
) -> ExitCode {
    println!(
        "running {} {} ({steps} steps each) on {jobs} threads",
        scenarios.len(),
        T::SUITE.seeds()
    );
    let summary = run_suite::<T>(scenarios, jobs, |result| match result {
        Ok(outcome) => {
            if replaying {
                println!("{outcome}");
            }
        }
        Err(failure) => eprintln!("{failure}"),
    });
    println!("\n{summary}");
    if summary.ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Runs the custom-resource scenario of each of `seeds`, one after the other, and prints each
/// failure with the command that replays it, and each seed that passed when `replaying` one.
fn run_reinstalls(seeds: &[u64], steps: usize, replaying: bool) -> ExitCode {
    let Some(runtime) = runtime() else {
        return ExitCode::FAILURE;
    };
    println!(
        "running {} reinstall seeds ({steps} steps each)",
        seeds.len()
    );
    let mut failed = 0;
    for &seed in seeds {
        match runtime.block_on(run_reinstall(seed, steps)) {
            Ok(outcome) if replaying => println!("{outcome}"),
            Ok(_) => {}
            Err(problems) => {
                failed += 1;
                eprintln!("seed {seed} failed:");
                for problem in problems {
                    eprintln!("  - {problem}");
                }
                eprintln!("  replay: {}", reinstall_replay_command(seed, steps));
            }
        }
    }
    println!("{} of {} seeds passed", seeds.len() - failed, seeds.len());
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Runs the sharded scenario of each of `scenarios` with every replica a process of this
/// executable, one seed after the other; prints each failure with the command that replays it,
/// and each seed that passed.
fn run_in_processes(scenarios: &[Scenario], replaying: bool) -> ExitCode {
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => {
            eprintln!("--processes: this executable's path: {e}");
            return ExitCode::FAILURE;
        }
    };
    let Some(runtime) = runtime() else {
        return ExitCode::FAILURE;
    };
    println!(
        "running {} sharded seeds, each replica a process of its own",
        scenarios.len()
    );
    let mut failed = 0;
    for scenario in scenarios {
        match runtime.block_on(run_sharded_processes(scenario, &exe)) {
            Ok(outcome) => println!("{outcome}"),
            Err(failure) => {
                failed += 1;
                eprintln!("{failure} --processes");
            }
        }
    }
    if !replaying {
        println!(
            "{} of {} seeds passed",
            scenarios.len() - failed,
            scenarios.len()
        );
    }
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// A runtime on two worker threads, or `None` (said on stderr) if it cannot be built.
fn runtime() -> Option<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .inspect_err(|e| eprintln!("building a runtime: {e}"))
        .ok()
}
