//! The standalone binary: it prints its URL, writes a kubeconfig kube-client accepts, seeds pods
//! and churns them.

use std::process::Stdio;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, WatchEvent, WatchParams};
use tokio::io::{AsyncBufReadExt, BufReader};

const WAIT: Duration = Duration::from_secs(20);

/// A running binary, a client for its `default` namespace built from the kubeconfig it wrote,
/// and that kubeconfig's directory.
struct Running {
    child: tokio::process::Child,
    pods: Api<Pod>,
    dir: std::path::PathBuf,
    /// Its standard output, kept open so that it can go on printing.
    _stdout: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

impl Running {
    async fn stop(mut self) {
        self.child.kill().await.unwrap();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The binary started with `args`, its kubeconfig in a directory of its own (`name`).
async fn start(name: &str, args: &[&str]) -> Running {
    let dir = std::env::temp_dir().join(format!(
        "informer-apiserver-bin-{name}-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_informer-apiserver"))
        .args(args)
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the binary starts");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let url = tokio::time::timeout(WAIT, lines.next_line())
        .await
        .expect("the URL in time")
        .unwrap()
        .expect("a first line");
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");

    let config = kube::config::Kubeconfig::read_from(&kubeconfig).unwrap();
    let mut config =
        kube::Config::from_custom_kubeconfig(config, &kube::config::KubeConfigOptions::default())
            .await
            .unwrap();
    assert_eq!(config.cluster_url.to_string().trim_end_matches('/'), url);
    config.default_retry = false;
    let pods: Api<Pod> = Api::default_namespaced(kube::Client::try_from(config).unwrap());
    Running {
        child,
        pods,
        dir,
        _stdout: lines,
    }
}

#[tokio::test]
async fn the_binary_serves_seeded_pods_writes_a_kubeconfig_and_churns() {
    let running = start("churn", &["--seed-pods", "25", "--churn", "100"]).await;
    let pods = &running.pods;
    let list = pods.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 25);

    // The churn shows up on a watch.
    let rv = list.metadata.resource_version.unwrap();
    let mut stream = pods
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    let event = tokio::time::timeout(WAIT, stream.next())
        .await
        .expect("a churn event in time")
        .unwrap()
        .unwrap();
    assert!(
        matches!(event, WatchEvent::Modified(_) | WatchEvent::Bookmark(_)),
        "{event:?}"
    );

    running.stop().await;
}

/// `--opaque-resource-versions` and `--cache-delay-ms`: versions are not numbers, and a change
/// made after the start (here a pod created) is missing from cached reads for that long.
#[tokio::test]
async fn the_binary_can_serve_opaque_versions_and_a_late_cache() {
    let running = start(
        "late",
        &[
            "--seed-pods",
            "3",
            "--opaque-resource-versions",
            "--cache-delay-ms",
            "3600000",
            "--block-slow-watchers",
        ],
    )
    .await;
    let pods = &running.pods;
    let mut pod = Pod::default();
    pod.metadata.name = Some("late".into());
    pod.spec = Some(
        serde_json::from_value(
            serde_json::json!({"containers": [{"name": "c", "image": "nginx"}]}),
        )
        .unwrap(),
    );
    pods.create(&Default::default(), &pod).await.unwrap();
    let fresh = pods.list(&ListParams::default()).await.unwrap();
    assert_eq!(fresh.items.len(), 4);
    let rv = fresh.metadata.resource_version.unwrap();
    assert!(rv.starts_with('x'), "{rv}");
    let cached = pods.list(&ListParams::default().match_any()).await.unwrap();
    assert_eq!(
        cached.items.len(),
        3,
        "the cache has not received the new pod"
    );

    running.stop().await;
}

/// Without `--kubeconfig`, the kubeconfig goes to the system's temporary directory (not the
/// working directory), at the path the binary prints, and it names the binary's URL.
#[tokio::test]
async fn without_a_path_the_kubeconfig_goes_to_the_temporary_directory() {
    let cwd =
        std::env::temp_dir().join(format!("informer-apiserver-bin-cwd-{}", std::process::id()));
    std::fs::create_dir_all(&cwd).unwrap();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_informer-apiserver"))
        .current_dir(&cwd)
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the binary starts");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut next = async || {
        tokio::time::timeout(WAIT, lines.next_line())
            .await
            .expect("a line in time")
            .unwrap()
            .expect("a line")
    };
    let url = next().await;
    let written = next().await;
    let path = written
        .strip_prefix("kubeconfig written to ")
        .and_then(|rest| rest.split(" (").next())
        .unwrap_or_else(|| panic!("{written}"));
    let path = std::path::PathBuf::from(path);
    assert!(path.starts_with(std::env::temp_dir()), "{}", path.display());
    let config = kube::config::Kubeconfig::read_from(&path).unwrap();
    let server = config.clusters[0].cluster.as_ref().unwrap().server.clone();
    assert_eq!(
        server.as_deref().map(|s| s.trim_end_matches('/')),
        Some(url.as_str())
    );
    assert_eq!(
        std::fs::read_dir(&cwd).unwrap().count(),
        0,
        "nothing written to the working directory"
    );
    child.kill().await.unwrap();
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_dir_all(&cwd);
}
