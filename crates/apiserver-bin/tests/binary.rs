//! The standalone binary: it prints its URL, writes a kubeconfig kube-client accepts, seeds pods
//! and churns them.

use std::process::Stdio;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, WatchEvent, WatchParams};
use tokio::io::{AsyncBufReadExt, BufReader};

const WAIT: Duration = Duration::from_secs(20);

#[tokio::test]
async fn the_binary_serves_seeded_pods_writes_a_kubeconfig_and_churns() {
    let dir = std::env::temp_dir().join(format!("informer-apiserver-bin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_informer-apiserver"))
        .args(["--seed-pods", "25", "--churn", "100", "--kubeconfig"])
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

    child.kill().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
