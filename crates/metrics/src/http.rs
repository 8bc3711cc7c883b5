//! `/metrics`, `/readyz` and `/livez` over HTTP, as an axum router (feature `http`).

use std::sync::Arc;

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use informer::HealthOptions;
use informer_factory::{FactoryStats, SharedInformerFactory};
use parking_lot::Mutex;

use crate::Metrics;

/// The content type of OpenMetrics text.
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// What the endpoints report on: a registry and the factories whose health counts.
///
/// ```no_run
/// # async fn doc(factory: informer_factory::SharedInformerFactory<()>) -> std::io::Result<()> {
/// use informer_metrics::{Endpoints, Metrics};
/// let metrics = Metrics::new();
/// metrics.watch_factory(&factory);
/// let app = Endpoints::new(metrics).with_factory(&factory).router();
/// let listener = tokio::net::TcpListener::bind("0.0.0.0:9090").await?;
/// axum::serve(listener, app).await
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Endpoints {
    metrics: Metrics,
    factories: Arc<Mutex<Vec<FactoryStats>>>,
    options: HealthOptions,
}

impl Endpoints {
    /// Endpoints over `metrics`, with the default [`HealthOptions`].
    pub fn new(metrics: Metrics) -> Self {
        Self {
            metrics,
            factories: Arc::default(),
            options: HealthOptions::default(),
        }
    }

    /// `/readyz` and `/livez` also report on `factory`'s informers.
    pub fn with_factory<S: Send + Sync + 'static>(
        self,
        factory: &SharedInformerFactory<S>,
    ) -> Self {
        self.factories.lock().push(factory.stats_handle());
        self
    }

    /// When an informer counts as stalled.
    pub fn with_health_options(mut self, options: HealthOptions) -> Self {
        self.options = options;
        self
    }

    /// `GET /metrics` (OpenMetrics text), `GET /readyz` (200 once every informer is synced and
    /// none has a problem, else 503 with the reasons), `GET /livez` (200 unless an informer has
    /// a problem: stopped, stalled, a watch down, a consumer stopped).
    pub fn router(self) -> Router {
        let (ready, live, scrape) = (self.clone(), self.clone(), self);
        Router::new()
            .route(
                "/metrics",
                get(move || async move {
                    (
                        [(header::CONTENT_TYPE, OPENMETRICS)],
                        scrape.metrics.encode(),
                    )
                        .into_response()
                }),
            )
            .route("/readyz", get(move || async move { ready.check(true) }))
            .route("/livez", get(move || async move { live.check(false) }))
    }

    fn check(&self, readiness: bool) -> Response {
        let factories = self.factories.lock().clone();
        let mut report = String::new();
        let mut ok = true;
        for factory in &factories {
            let health = factory.health(&self.options);
            ok &= if readiness {
                health.is_ready()
            } else {
                health.is_live()
            };
            for informer in &health.informers {
                report.push_str(&informer.to_string());
                report.push('\n');
            }
        }
        let status = if ok {
            StatusCode::OK
        } else {
            StatusCode::SERVICE_UNAVAILABLE
        };
        let body = if ok { format!("ok\n{report}") } else { report };
        (
            status,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            body,
        )
            .into_response()
    }
}
