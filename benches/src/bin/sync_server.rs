//! The server of SYNC (see [`informer_benches::sync`]): the simulator in a process of its own,
//! holding `n` pods of a shape. `sync_server [realistic|small] [n]` prints `url <url>` once
//! the pods are in, then serves until its standard input ends. A line `bandwidth <bytes/s>` on
//! its standard input limits its responses to that rate from then on (`0`: no limit), answered
//! by the same line on its standard output.

use std::io::{BufRead, Write};

use informer_benches::sync::{self, Shape};

fn main() {
    let mut args = std::env::args().skip(1);
    let shape = args.next().unwrap_or_else(|| "small".into());
    let shape = Shape::parse(&shape).expect("a shape: realistic or small");
    let n: usize = args
        .next()
        .map(|n| n.parse().expect("n: a number"))
        .unwrap_or(match shape {
            Shape::Realistic => 10_000,
            Shape::Small => 50_000,
        });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let server = rt.block_on(sync::server(shape, n));
    println!("url {}", server.url());
    std::io::stdout().flush().expect("stdout");
    // Serves until the parent closes our standard input (or goes away).
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        if let Some(rate) = line
            .strip_prefix("bandwidth ")
            .and_then(|rate| rate.trim().parse::<u64>().ok())
        {
            server.faults().set_bandwidth(Some(rate).filter(|&r| r > 0));
            println!("bandwidth {rate}");
            std::io::stdout().flush().expect("stdout");
        }
    }
    rt.block_on(server.shutdown());
}
