//! A client of SYNC (see [`informer_benches::sync`]), in a fresh process:
//! `sync_client <url> [ours|ours-json|ours-managed-fields|ours-compact|kube-runtime] [list|streaming]
//! [plain|gzip|h2c]`.
//! Syncs every pod of the server at `url` and prints the figures as one line (`synced <s>
//! <objects> <rss after> <rss before>`, [`Synced::line`](informer_benches::sync::Synced::line)).

use std::process::ExitCode;
use std::time::Duration;

use informer_benches::sync::{self, Mode, Side, Transport};

// With the `mimalloc` feature, as the `report` that runs this binary.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Longer than any sync: only a hang reaches it.
const LIMIT: Duration = Duration::from_secs(300);

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let url = args.next().expect("the server's URL");
    let side = args.next().unwrap_or_else(|| "ours".into());
    let side = Side::parse(&side)
        .expect("a side: ours, ours-json, ours-managed-fields, ours-compact, kube-runtime");
    let mode = args.next().unwrap_or_else(|| "list".into());
    let mode = Mode::parse(&mode).expect("a mode: list or streaming");
    let transport = args.next().unwrap_or_else(|| "plain".into());
    let transport = Transport::parse(&transport).expect("a transport: plain, gzip or h2c");
    // The runtime of a controller on two cores; built before the figures start.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    match rt.block_on(sync::sync(&url, (side, mode, transport), LIMIT)) {
        Some(synced) => {
            println!("{}", synced.line());
            ExitCode::SUCCESS
        }
        None => {
            eprintln!(
                "{} ({}) did not sync within {LIMIT:?}",
                side.name(),
                mode.name()
            );
            ExitCode::FAILURE
        }
    }
}
