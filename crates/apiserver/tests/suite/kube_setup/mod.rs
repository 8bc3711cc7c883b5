//! A simulator and a kube-client talking to it: how the tests that go through kube-client start.

#![allow(dead_code, unreachable_pub)]

use informer_apiserver::{ApiServer, Config};

/// A server with `config`, and a client of it that does not retry on its own.
pub async fn start_with(config: Config) -> (ApiServer, kube::Client) {
    let server = ApiServer::start(config).await.expect("server starts");
    let mut config = kube::Config::new(server.url().parse().expect("a valid URL"));
    // kube-client retries 429/503/504 by itself (15 times, honouring Retry-After); these tests
    // look at the responses themselves.
    config.default_retry = false;
    let client = kube::Client::try_from(config).expect("a client");
    (server, client)
}
