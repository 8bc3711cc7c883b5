//! The `ListerWatcher` conformance suite against the kube adapter and the in-process API server,
//! for both the full-object and the metadata-only variant.

use std::time::Duration;

use informer_apiserver::{ApiServer, Config};
use informer_kube::{KubeListerWatcher, MetadataListerWatcher};
use informer_testing::reflector::conformance::{Backend, check};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Api, Resource};

struct Server<'a>(&'a ApiServer);

impl Server<'_> {
    fn put(&self, name: &str) {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(name.to_owned());
        cm.metadata.namespace = Some("conformance".to_owned());
        cm.data = Some([("rev".to_owned(), self.0.resource_version().to_string())].into());
        match self.0.get::<ConfigMap>(Some("conformance"), name) {
            Ok(existing) => {
                cm.metadata.resource_version = existing.metadata.resource_version;
                self.0.update(&cm).unwrap();
            }
            Err(_) => {
                self.0.create(&cm).unwrap();
            }
        }
    }
}

/// Both variants name objects the same way; the suite only needs the name.
impl<O: Resource + Send + Sync> Backend<O> for Server<'_> {
    async fn put(&self, name: &str) {
        Server::put(self, name);
    }
    async fn delete(&self, name: &str) {
        self.0
            .delete::<ConfigMap>(Some("conformance"), name)
            .unwrap();
    }
    fn name_of(&self, object: &O) -> String {
        object.meta().name.clone().unwrap_or_default()
    }
}

async fn server_and_client() -> (ApiServer, kube::Client) {
    let server = ApiServer::start(Config::for_tests(Duration::from_millis(100)))
        .await
        .unwrap();
    let mut config = kube::Config::new(server.url().parse().unwrap());
    config.default_retry = false;
    let client = kube::Client::try_from(config).unwrap();
    (server, client)
}

#[tokio::test]
async fn the_kube_adapter_conforms() {
    let (server, client) = server_and_client().await;
    let lw = KubeListerWatcher::new(Api::<ConfigMap>::namespaced(client, "conformance"));
    check(&lw, &Server(&server)).await;
    server.shutdown().await;
}

#[tokio::test]
async fn the_metadata_adapter_conforms() {
    let (server, client) = server_and_client().await;
    let lw = MetadataListerWatcher::new(Api::<ConfigMap>::all(client));
    check(&lw, &Server(&server)).await;
    server.shutdown().await;
}
