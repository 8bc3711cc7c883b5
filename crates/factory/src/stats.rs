//! [`FactoryStats`] and [`FactoryHealth`]: the state of a factory's informers, read from
//! anywhere.

use std::fmt;
use std::sync::Arc;

use informer::{Health, HealthOptions, InformerStats};
use parking_lot::Mutex;

use crate::entry::Runnable;
use crate::factory::State;

/// Reads the stats of a factory's informers (from
/// [`SharedInformerFactory::stats_handle`](crate::SharedInformerFactory::stats_handle)).
#[derive(Clone)]
pub struct FactoryStats {
    pub(crate) state: Arc<Mutex<State>>,
}

impl fmt::Debug for FactoryStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FactoryStats")
            .field("informers", &self.state.lock().entries.len())
            .finish()
    }
}

impl FactoryStats {
    fn runners(&self) -> Vec<Arc<dyn Runnable>> {
        self.state
            .lock()
            .entries
            .iter()
            .map(|e| Arc::clone(&e.runner))
            .collect()
    }

    /// A snapshot of every informer the factory holds now.
    pub fn stats(&self) -> Vec<InformerStats> {
        self.runners().iter().map(|r| r.stats()).collect()
    }

    /// The health of every informer the factory holds now.
    pub fn health(&self, options: &HealthOptions) -> FactoryHealth {
        FactoryHealth {
            informers: self.runners().iter().map(|r| r.health(options)).collect(),
        }
    }
}

/// The health of a factory's informers (from
/// [`SharedInformerFactory::health`](crate::SharedInformerFactory::health)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FactoryHealth {
    /// Each informer's, in the order they were first requested.
    pub informers: Vec<Health>,
}

impl FactoryHealth {
    /// Every informer is live (a liveness check, see [`Health::is_live`]: a resource not
    /// served is not a liveness problem).
    pub fn is_live(&self) -> bool {
        self.informers.iter().all(Health::is_live)
    }

    /// Every informer is ready (a readiness check, see [`Health::is_ready`]: synced, running,
    /// no problem but a resource no longer served).
    pub fn is_ready(&self) -> bool {
        self.informers.iter().all(Health::is_ready)
    }

    /// As [`is_ready`](Self::is_ready), but an informer whose resource the server does not
    /// serve ([`Health::is_not_served`]: a CRD not installed yet) does not make the factory
    /// unready: for a program whose custom resources are optional.
    pub fn is_ready_served(&self) -> bool {
        self.informers
            .iter()
            .all(|h| h.is_ready() || h.is_not_served())
    }

    /// The informers whose resource the server does not serve now.
    pub fn not_served(&self) -> impl Iterator<Item = &Health> {
        self.informers.iter().filter(|h| h.is_not_served())
    }
}

impl fmt::Display for FactoryHealth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, health) in self.informers.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{health}")?;
        }
        Ok(())
    }
}
