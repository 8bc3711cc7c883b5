//! Runs every workload once more, ours and kube-runtime side by side, and prints one table.
//!
//! `cargo run --release -p informer-benches --bin report [-- --quick] [--only <name>]...
//! [--touch-memory <GiB>]`
//!
//! MEM runs in processes of their own: the `mem` binary next to this one (cargo builds it first,
//! as `w_http_client`). With the `mimalloc` feature, this binary and `w_http_client` allocate with mimalloc
//! (both sides of every row alike), and the report says so.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use clap::Parser;
use informer_benches::Sizes;
use informer_benches::report::{self, Options, WORKLOADS};

#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The global allocator of this binary (and of the `w_http_client` it runs).
const ALLOCATOR: &str = if cfg!(feature = "mimalloc") {
    "mimalloc"
} else {
    "the system's (glibc malloc)"
};

/// The informers benchmark report: ours and kube-runtime, same run, same objects.
#[derive(Debug, Parser)]
#[command(name = "report")]
struct Args {
    /// Smaller sizes (a tenth): a smoke run.
    #[arg(long)]
    quick: bool,
    /// Only the workloads whose name contains this (w-fifo-a, w-fifo-b, w-fifo-c, w-wq, w-idx,
    /// w-inf, w-http, w-ctrl, w-shard, mem, sync, sync-wire); repeatable.
    #[arg(long, value_name = "NAME")]
    only: Vec<String>,
    /// Repetitions of each workload (figures are medians).
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Before measuring, write to this many GiB of memory once and give them back. A virtual
    /// machine backs its guest's memory on first touch: on a freshly booted one, the first use
    /// of a page cost about 16 µs here against under 3 µs once backed, so whichever side of a
    /// comparison meets never-used pages loses by chance. Touching most of the free memory once
    /// after boot takes that out of the figures.
    #[arg(long, value_name = "GIB", default_value_t = 0)]
    touch_memory: usize,
}

/// Writes to `gib` GiB, a GiB at a time, and frees each (large blocks go back to the system).
fn touch_memory(gib: usize) {
    let started = std::time::Instant::now();
    for _ in 0..gib {
        // Not `vec![0; n]`: zeroed memory is mapped lazily and never touched.
        let block = vec![1u8; 1 << 30];
        std::hint::black_box(&block);
    }
    eprintln!(
        "touched {gib} GiB in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

/// The benches' binary `name` beside this one, built (or found up to date) by cargo with this
/// binary's profile and features first, so that it is optimised and allocates as this one does.
fn sibling_exe(name: &str) -> Option<PathBuf> {
    let dir = std::env::current_exe().ok()?.parent()?.to_path_buf();
    let exe = dir.join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| env!("CARGO").to_owned());
    let profile = profile_of(&dir);
    eprintln!("building the {name} binary ({profile}, allocator: {ALLOCATOR})…");
    let mut build = Command::new(cargo);
    build.args([
        "build",
        "-p",
        "informer-benches",
        "--bin",
        name,
        "--profile",
        profile,
    ]);
    if cfg!(feature = "mimalloc") {
        build.args(["--features", "mimalloc"]);
    }
    let built = build.status().is_ok_and(|s| s.success());
    if !built || !exe.exists() {
        eprintln!(
            "no {name} binary built at {}: its rows are not measured",
            exe.display()
        );
        return None;
    }
    Some(exe)
}

/// The cargo profile whose binaries are in `dir`: cargo names a profile's directory after it,
/// except `dev`'s (`debug`). Elsewhere (a binary copied out), the profile it was built like.
fn profile_of(dir: &Path) -> &str {
    match dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") => "dev",
        Some(name @ ("release" | "perf")) => name,
        _ if cfg!(debug_assertions) => "dev",
        _ => "release",
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    touch_memory(args.touch_memory);
    let opts = Options {
        sizes: if args.quick {
            Sizes::quick()
        } else {
            Sizes::full()
        },
        reps: args.reps.max(1),
        only: args.only,
        mem_exe: None,
        w_http_exe: None,
        sync_exes: None,
        w_shard_exe: None,
    };
    let unknown = opts.unknown_names();
    if !unknown.is_empty() {
        eprintln!(
            "no workload matches {}; the workloads are {}",
            unknown.join(", "),
            WORKLOADS.join(", ")
        );
        return ExitCode::FAILURE;
    }
    let opts = Options {
        mem_exe: if WORKLOADS
            .iter()
            .any(|w| w.starts_with("mem") && opts.selected(w))
        {
            sibling_exe("mem")
        } else {
            None
        },
        w_http_exe: if opts.selected("w-http-process") {
            sibling_exe("w_http_client")
        } else {
            None
        },
        sync_exes: if opts.selected("sync") || opts.selected("sync-wire") {
            sibling_exe("sync_server").zip(sibling_exe("sync_client"))
        } else {
            None
        },
        w_shard_exe: if opts.selected("w-shard") {
            sibling_exe("w_shard")
        } else {
            None
        },
        ..opts
    };
    println!("machine: {}", report::machine());
    println!("allocator: {ALLOCATOR}");
    let exe = std::env::current_exe().ok();
    let profile = exe.as_deref().and_then(Path::parent).map(profile_of);
    println!("profile: {}", profile.unwrap_or("unknown"));
    println!(
        "sizes: {:?}, {} repetitions, medians",
        opts.sizes, opts.reps
    );
    let rows = report::run(&opts, &mut |row| {
        eprintln!(
            "{} | {} | ours {} | kube-runtime {}",
            row.workload, row.phase, row.ours, row.kube_runtime
        );
    });
    println!();
    print!("{}", report::render(&rows));
    println!();
    println!("machine at the end: {}", report::machine());
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_profile_is_read_from_the_binarys_directory() {
        assert_eq!(profile_of(Path::new("target/debug")), "dev");
        assert_eq!(profile_of(Path::new("target/release")), "release");
        assert_eq!(profile_of(Path::new("/work/target/perf")), "perf");
        // A binary copied out: the profile it was built like.
        let built = if cfg!(debug_assertions) {
            "dev"
        } else {
            "release"
        };
        assert_eq!(profile_of(Path::new("/usr/local/bin")), built);
    }
}
