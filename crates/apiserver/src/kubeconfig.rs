//! A kubeconfig for a running server, as plain YAML (no YAML library needed for this shape).

/// The kubeconfig text for a server at `url`: one cluster, one context, one user without
/// credentials (the simulator does not authenticate).
pub(crate) fn render(url: &str) -> String {
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
  user: {{}}
preferences: {{}}
"
    )
}
