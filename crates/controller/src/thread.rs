//! Threads that async code can join without blocking its runtime.

use std::thread::JoinHandle;

use tokio::sync::oneshot;

/// A thread that can be joined from async code without blocking the runtime.
pub(crate) struct Joinable {
    handle: JoinHandle<()>,
    /// Resolves when the thread ends; `None` once that has been seen.
    done: Option<oneshot::Receiver<()>>,
}

impl Joinable {
    /// Spawns `f` on a named thread.
    pub(crate) fn spawn(name: String, f: impl FnOnce() + Send + 'static) -> std::io::Result<Self> {
        let (tx, done) = oneshot::channel();
        let handle = std::thread::Builder::new().name(name).spawn(move || {
            f();
            let _ = tx.send(());
        })?;
        Ok(Self {
            handle,
            done: Some(done),
        })
    }

    /// Whether the thread has finished.
    pub(crate) fn is_finished(&self) -> bool {
        self.handle.is_finished()
    }

    /// Waits for the thread to finish, without joining it (cancel-safe).
    pub(crate) async fn finished(&mut self) {
        if let Some(done) = &mut self.done {
            // The sender is dropped even if `f` panics, so this always returns.
            let _ = done.await;
            self.done = None;
        }
    }

    /// Waits for the thread to finish, then joins it, resuming its panic if it panicked.
    pub(crate) async fn join(mut self) {
        self.finished().await;
        if let Err(panic) = self.handle.join() {
            std::panic::resume_unwind(panic);
        }
    }
}
