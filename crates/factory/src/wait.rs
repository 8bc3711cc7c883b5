//! Waiting for a factory's informers to sync: all of them, or those whose resource the server
//! serves.

use std::sync::Arc;
use std::time::Duration;

use informer_reflector::Availability;

use crate::entry::Entry;
use crate::factory::SharedInformerFactory;
use crate::sync_report::CacheSyncReport;

impl<S: Send + Sync + 'static> SharedInformerFactory<S> {
    /// Waits until every started informer has synced (delivered its first full list to its
    /// cache and handlers) or stopped, or until `timeout` (if any) has passed, and reports on
    /// each started informer (client-go's `WaitForCacheSync`). The wait is woken by each
    /// informer's own change of state, never by polling, and is cancel-safe.
    ///
    /// Informers not started are not waited for and not reported, as in client-go. An
    /// informer whose resource the server does not serve (see
    /// [`wait_for_cache_sync_served`](Self::wait_for_cache_sync_served)) is waited for until
    /// it is served and synced.
    pub async fn wait_for_cache_sync(&self, timeout: Option<Duration>) -> CacheSyncReport {
        self.wait_for(timeout, false).await
    }

    /// As [`wait_for_cache_sync`](Self::wait_for_cache_sync), but an informer whose resource
    /// the server does not serve (its list answered `404 NotFound`: a CRD not installed yet)
    /// is not waited for: the wait ends once each started informer has synced, stopped, or
    /// found its resource not served. The report says which were not served
    /// ([`CacheSyncReport::not_served`]); each of them goes on waiting for its resource, and
    /// syncs once it is served.
    pub async fn wait_for_cache_sync_served(&self, timeout: Option<Duration>) -> CacheSyncReport {
        self.wait_for(timeout, true).await
    }

    async fn wait_for(&self, timeout: Option<Duration>, served_only: bool) -> CacheSyncReport {
        let runners: Vec<_> = {
            let state = self.state.lock();
            state
                .entries
                .iter()
                .filter(|e| e.started)
                .map(|e| (Arc::clone(&e.runner), e.availability.clone()))
                .collect()
        };
        // Each wait is woken by its informer's own change (synced, stopped, not served).
        let all = async {
            for (runner, mut availability) in runners {
                let not_served = async {
                    let told = availability.wait_for(|a| *a == Availability::NotServed);
                    if !served_only || told.await.is_err() {
                        std::future::pending::<()>().await;
                    }
                };
                tokio::select! {
                    _ = runner.wait_for_sync() => {}
                    () = not_served => {}
                }
            }
        };
        match timeout {
            Some(timeout) => {
                let _ = tokio::time::timeout(timeout, all).await;
            }
            None => all.await,
        }
        let state = self.state.lock();
        CacheSyncReport {
            informers: state
                .entries
                .iter()
                .filter(|e| e.started)
                .map(Entry::status)
                .collect(),
        }
    }
}
