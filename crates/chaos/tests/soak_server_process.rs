//! A short soak with the simulator in a process of its own (the `informer-chaos` binary run
//! with `--soak-server`): the writes, the faults and the final state cross the process
//! boundary, and the informers still converge with nothing lost.

use std::path::PathBuf;
use std::time::Duration;

use informer_chaos::{SoakOptions, soak};

#[test]
fn a_soak_against_a_server_process_converges() {
    let report = soak(&SoakOptions {
        objects: 300,
        duration: Duration::from_secs(2),
        rate: 200,
        fault_every: 100,
        seed: 3,
        slow_handler: Duration::ZERO,
        server_process: Some(PathBuf::from(env!("CARGO_BIN_EXE_informer-chaos"))),
    });
    println!("{report}");
    assert!(report.ok(), "{:?}", report.problems);
    assert!(report.writes > 0 && report.faults.values().sum::<u64>() > 0);
    assert!(report.final_objects > 0);
    assert!(
        report.server_peak_rss_kib.is_some(),
        "the server process answered"
    );
    assert!(report.lag.samples > 0, "write times came across");
    assert!(
        report.lag.p50 < Duration::from_secs(60),
        "the two clocks agree: {:?}",
        report.lag
    );
}
