//! Stopping an informer leaves no thread and no task behind. (Its own test binary: it counts
//! the process's threads.)

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;

/// Threads of this process whose name starts with `informer-` (the pop loop, handler workers).
fn informer_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .map(|tasks| {
            tasks
                .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
                .filter(|name| name.starts_with("informer-"))
                .count()
        })
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_joins_every_thread_and_task() {
    if !std::path::Path::new("/proc/self/task").exists() {
        eprintln!("no /proc: thread counting not available on this platform");
        return;
    }
    let metrics = tokio::runtime::Handle::current().metrics();
    assert_eq!(informer_threads(), 0);
    let source = ChannelSource::new();
    source.push_list(
        (0..20).map(|i| obj("a", &format!("o{i}"), i + 1)).collect(),
        20,
    );
    let watch = source.open_watch();
    let informer = Arc::new(informer(&source, Duration::from_secs(1), Kind::DeltaFifo));
    let regs: Vec<_> = (0..4)
        .map(|_| informer.add_event_handler(Recorder::new()).unwrap())
        .collect();
    let (stop, task) = start(&informer);
    informer.wait_for_sync().await;
    for i in 0..200 {
        watch.modified(&obj("a", &format!("o{}", i % 20), 100 + i));
    }
    eventually("the pop loop and four workers are running", || {
        informer_threads() == 5
    })
    .await;
    assert!(metrics.num_alive_tasks() >= 1);

    stop.cancel();
    task.await.unwrap().unwrap();
    assert_eq!(
        informer_threads(),
        0,
        "every informer thread has been joined"
    );
    // The runtime releases a finished task's slot on its worker thread, a moment after `await`.
    eventually("no task left behind", || metrics.num_alive_tasks() == 0).await;
    assert!(regs.iter().all(|r| r.is_stopped()));
}
