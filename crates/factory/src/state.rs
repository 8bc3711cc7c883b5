//! What a factory holds: its entries, the index of their sharing keys, the tasks of the
//! started ones.

use std::collections::HashMap;

use informer::InformerError;
use tokio::task::{JoinError, JoinHandle};

use crate::entry::{Entry, Key};
use crate::error::FactoryError;

/// A started informer's task: its entry's id, its name, its handle.
pub(crate) type Task = (u64, String, JoinHandle<Result<(), InformerError>>);

#[derive(Default)]
pub(crate) struct State {
    pub(crate) entries: Vec<Entry>,
    pub(crate) by_key: HashMap<Key, usize>,
    pub(crate) tasks: Vec<Task>,
    pub(crate) shutting_down: bool,
    /// The id of the next entry.
    pub(crate) next_id: u64,
}

impl State {
    /// Takes entry `i` out, with its task if it was started.
    pub(crate) fn take(&mut self, i: usize) -> (Entry, Option<Task>) {
        let entry = self.entries.remove(i);
        self.by_key.retain(|_, at| *at != i);
        for at in self.by_key.values_mut().filter(|at| **at > i) {
            *at -= 1;
        }
        let task = self
            .tasks
            .iter()
            .position(|(id, ..)| *id == entry.id)
            .map(|at| self.tasks.remove(at));
        (entry, task)
    }
}

/// The failure a joined informer task reports, if any (logged, as every one is).
pub(crate) fn failure(
    informer: String,
    joined: Result<Result<(), InformerError>, JoinError>,
) -> Option<FactoryError> {
    let failure = match joined {
        Ok(Ok(())) => return None,
        Ok(Err(source)) => FactoryError::Informer { informer, source },
        Err(e) if e.is_panic() => FactoryError::Panicked { informer },
        // The runtime is shutting down and took the task with it.
        Err(_) => return None,
    };
    tracing::error!(error = %failure, "informer ended with an error");
    Some(failure)
}
