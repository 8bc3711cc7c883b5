//! The `ListerWatcher` conformance suite against the in-memory test server.

use crate::common;

use std::sync::Arc;

use common::Obj;
use common::model_server::ModelServer;
use informer_testing::reflector::conformance::{Backend, check};

struct ModelBackend(Arc<ModelServer>);

impl Backend<Obj> for ModelBackend {
    async fn put(&self, name: &str) {
        self.0.put(name);
    }

    async fn delete(&self, name: &str) {
        self.0.delete(name);
    }

    fn name_of(&self, object: &Obj) -> String {
        object.name.clone()
    }
}

#[tokio::test(start_paused = true)]
async fn the_in_memory_server_conforms() {
    let server = ModelServer::new();
    check(&server, &ModelBackend(server.clone())).await;
}
