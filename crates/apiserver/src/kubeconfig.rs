//! A kubeconfig for a running server, as plain YAML (no YAML library needed for this shape).

/// The kubeconfig text for a server at `url`: one cluster, one context, one user, without
/// credentials (the simulator does not authenticate) or with a bearer `token`, which is how
/// the simulator tells clients apart (see `Faults::isolate`).
pub(crate) fn render(url: &str, token: Option<&str>) -> String {
    // A JSON string is a YAML double-quoted scalar: any token is written safely.
    let user = match token {
        Some(token) => format!(
            "\n    token: {}",
            serde_json::Value::String(token.to_owned())
        ),
        None => " {}".to_owned(),
    };
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: informer-apiserver
  cluster:
    server: {url}
contexts:
- name: informer-apiserver
  context:
    cluster: informer-apiserver
    user: informer-apiserver
    namespace: default
current-context: informer-apiserver
users:
- name: informer-apiserver
  user:{user}
preferences: {{}}
"
    )
}
