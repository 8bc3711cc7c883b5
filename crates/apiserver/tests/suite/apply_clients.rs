//! Server-side apply and the `/status` subresource as real clients use them: kube-client's
//! `Patch::Apply`, `patch_status` and `replace_status`, and `kubectl apply --server-side`
//! (when kubectl is installed).

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt;
use informer_apiserver::{ApiServer, Config};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(20);

async fn start() -> (ApiServer, kube::Client) {
    let server = ApiServer::start(Config::for_tests(Duration::from_millis(100)))
        .await
        .expect("server starts");
    let mut config = kube::Config::new(server.url().parse().expect("a valid URL"));
    config.default_retry = false;
    let client = kube::Client::try_from(config).expect("a client");
    (server, client)
}

fn config_map(data: Value) -> ConfigMap {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "settings", "namespace": "demo"},
        "data": data,
    }))
    .unwrap()
}

fn api_error(result: kube::Result<impl std::fmt::Debug>) -> Box<kube::core::Status> {
    match result {
        Err(kube::Error::Api(status)) => status,
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test]
async fn kube_client_applies_forces_and_reads_conflicts() {
    let (_server, client) = start().await;
    let cms: Api<ConfigMap> = Api::namespaced(client, "demo");
    let mut watch = cms
        .watch(&WatchParams::default(), "0")
        .await
        .expect("a watch")
        .boxed();
    let applied = cms
        .patch(
            "settings",
            &PatchParams::apply("deployer"),
            &Patch::Apply(&config_map(json!({"a": "1"}))),
        )
        .await
        .expect("created by apply");
    let entries = applied.metadata.managed_fields.clone().unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].manager.as_deref(), Some("deployer"));
    assert_eq!(entries[0].operation.as_deref(), Some("Apply"));
    assert_eq!(entries[0].fields_type.as_deref(), Some("FieldsV1"));
    // Watchers see the managed fields too.
    let added = loop {
        match tokio::time::timeout(WAIT, watch.next())
            .await
            .expect("an event in time")
            .expect("an open stream")
            .expect("an event")
        {
            WatchEvent::Added(cm) => break cm,
            WatchEvent::Bookmark(_) => continue,
            other => panic!("unexpected {other:?}"),
        }
    };
    assert_eq!(
        added.metadata.managed_fields,
        applied.metadata.managed_fields
    );

    // Another manager changing the field: a 409 Conflict that says who owns it.
    let status = api_error(
        cms.patch(
            "settings",
            &PatchParams::apply("other"),
            &Patch::Apply(&config_map(json!({"a": "2"}))),
        )
        .await,
    );
    assert_eq!(status.code, 409);
    assert_eq!(status.reason, "Conflict");
    assert_eq!(
        status.message,
        "Apply failed with 1 conflict: conflict with \"deployer\": .data.a"
    );
    let causes = status.details.expect("details").causes;
    assert_eq!(causes.len(), 1);
    assert_eq!(causes[0].reason, "FieldManagerConflict");
    assert_eq!(causes[0].field, ".data.a");
    // Forced, it takes the field.
    let forced = cms
        .patch(
            "settings",
            &PatchParams::apply("other").force(),
            &Patch::Apply(&config_map(json!({"a": "2"}))),
        )
        .await
        .expect("a forced apply");
    assert_eq!(forced.data.unwrap()["a"], "2");
    let managers: Vec<String> = forced
        .metadata
        .managed_fields
        .unwrap()
        .into_iter()
        .filter_map(|e| e.manager)
        .collect();
    assert_eq!(managers, ["other"], "the deployer owned nothing else");
}

#[tokio::test]
async fn kube_client_writes_and_reads_the_status_subresource() {
    let (server, client) = start().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "demo");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "web-0", "namespace": "demo"},
        "spec": {"containers": [{"name": "app", "image": "nginx:1"}]},
    }))
    .unwrap();
    let created = pods.create(&PostParams::default(), &pod).await.unwrap();
    // patch_status: the status changes, the spec in the patch does not.
    let patch = json!({"spec": {"nodeName": "node-9"}, "status": {"phase": "Running"}});
    let patched = pods
        .patch_status("web-0", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    assert_eq!(
        patched.status.as_ref().unwrap().phase.as_deref(),
        Some("Running")
    );
    assert_eq!(patched.spec, created.spec);
    assert_eq!(patched.metadata.generation, Some(1));
    // replace_status with the current object.
    let mut replacing = patched.clone();
    replacing.status.as_mut().unwrap().pod_ip = Some("10.0.0.7".into());
    replacing.spec.as_mut().unwrap().containers[0].image = Some("nginx:2".into());
    let replaced = pods
        .replace_status("web-0", &PostParams::default(), &replacing)
        .await
        .unwrap();
    assert_eq!(replaced.status.unwrap().pod_ip.as_deref(), Some("10.0.0.7"));
    assert_eq!(replaced.spec, created.spec);
    // An apply of the status, read back through get_status.
    let applied: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web-0", "namespace": "demo"},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }))
    .unwrap();
    pods.patch_status(
        "web-0",
        &PatchParams::apply("kubelet"),
        &Patch::Apply(&applied),
    )
    .await
    .unwrap();
    let read = pods.get_status("web-0").await.unwrap();
    let conditions = read.status.unwrap().conditions.unwrap();
    assert_eq!(conditions[0].type_, "Ready");
    let kubelet = read
        .metadata
        .managed_fields
        .unwrap()
        .into_iter()
        .find(|e| e.manager.as_deref() == Some("kubelet"))
        .unwrap();
    assert_eq!(kubelet.subresource.as_deref(), Some("status"));
    // A type without the subresource: kube-client reads the 404.
    let cms: Api<ConfigMap> = Api::namespaced(client, "demo");
    server.create(&config_map(json!({"a": "1"}))).unwrap();
    let status = api_error(cms.get_status("settings").await);
    assert_eq!((status.code, status.reason.as_str()), (404, "NotFound"));
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// Runs kubectl with `args`; its exit status and its output and error text together.
async fn kubectl(kubectl: &Path, kubeconfig: &Path, args: &[&str]) -> (bool, String) {
    let mut command = std::process::Command::new(kubectl);
    command.arg("--kubeconfig").arg(kubeconfig).args(args);
    let output = tokio::task::spawn_blocking(move || command.output().unwrap())
        .await
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

#[tokio::test]
async fn kubectl_applies_server_side() {
    let Some(kubectl_path) = which("kubectl") else {
        println!("kubectl is not installed: skipping the kubectl check");
        return;
    };
    let (server, client) = start().await;
    let dir = std::env::temp_dir().join(format!("informer-apiserver-ssa-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(&kubeconfig, server.kubeconfig()).unwrap();
    let manifest = |name: &str, value: &str| {
        let path = dir.join(name);
        let text = format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: demo\n\
             data:\n  a: \"{value}\"\n"
        );
        std::fs::write(&path, text).unwrap();
        path
    };
    let run = |args: Vec<String>| {
        let (kubectl_path, kubeconfig) = (kubectl_path.clone(), kubeconfig.clone());
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            kubectl(&kubectl_path, &kubeconfig, &args).await
        }
    };
    let apply = |file: &Path, extra: &[&str]| {
        let mut args = vec![
            "apply".to_owned(),
            "--server-side".to_owned(),
            "--validate=false".to_owned(),
            "-f".to_owned(),
            file.display().to_string(),
        ];
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        run(args)
    };
    let (ok, text) = apply(&manifest("v1.yaml", "1"), &[]).await;
    assert!(ok, "{text}");
    assert!(
        text.contains("configmap/settings serverside-applied"),
        "{text}"
    );
    let cms: Api<ConfigMap> = Api::namespaced(client, "demo");
    let first = cms.get("settings").await.unwrap();
    let entry = &first.metadata.managed_fields.as_ref().unwrap()[0];
    assert_eq!(entry.manager.as_deref(), Some("kubectl"));
    assert_eq!(entry.operation.as_deref(), Some("Apply"));

    // A second apply with a changed field.
    let (ok, text) = apply(&manifest("v2.yaml", "2"), &[]).await;
    assert!(ok, "{text}");
    assert_eq!(cms.get("settings").await.unwrap().data.unwrap()["a"], "2");

    // Another field manager: a conflict kubectl reports, unless it forces.
    let other = manifest("v3.yaml", "3");
    let (ok, text) = apply(&other, &["--field-manager=other"]).await;
    assert!(!ok, "{text}");
    assert!(
        text.contains("Apply failed with 1 conflict: conflict with \"kubectl\": .data.a"),
        "{text}"
    );
    assert_eq!(cms.get("settings").await.unwrap().data.unwrap()["a"], "2");
    let (ok, text) = apply(&other, &["--field-manager=other", "--force-conflicts"]).await;
    assert!(ok, "{text}");
    assert_eq!(cms.get("settings").await.unwrap().data.unwrap()["a"], "3");
    let _ = std::fs::remove_dir_all(dir);
}
