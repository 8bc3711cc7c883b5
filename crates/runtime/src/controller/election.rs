//! A [`Controller`] in a leader election: it reconciles only within the terms it wins, and
//! begins each by queueing everything, since another leader may have left work.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use informer_leaderelection::{LeaderElector, Term};
use informer_workqueue::LOW_PRIORITY;
use tokio_util::sync::CancellationToken;

use super::Controller;
use crate::handlers::{Change, priority};

impl<K: Send + Sync + 'static> Controller<K> {
    /// Runs `elector`'s election and, within each term it wins, `reconcile_until(the term's
    /// token)` (`true`: stopped), until `stop`.
    ///
    /// The election runs beside the terms until the reconciles have stopped: the lease is
    /// released only once nothing of this replica's term is under way. Both are polled by this
    /// future, so dropping it (a crash) ends the election too.
    pub(super) async fn lead<F, Fut>(
        &self,
        elector: &LeaderElector,
        stop: &CancellationToken,
        reconcile_until: F,
    ) where
        F: Fn(CancellationToken) -> Fut,
        Fut: Future<Output = bool>,
    {
        let election_stop = CancellationToken::new();
        let terms = async {
            loop {
                let term = tokio::select! {
                    term = elector.leading() => term,
                    () = stop.cancelled() => break,
                };
                self.begin_term(&term);
                let stopped = reconcile_until(term.token()).await;
                self.reconciling.store(false, Ordering::Release);
                if stopped {
                    break;
                }
                tracing::info!(term = term.number, "leadership lost: reconciles stopped");
            }
            election_stop.cancel();
        };
        tokio::join!(elector.run(election_stop.clone()), terms);
    }

    /// A new term: everything may need work (another leader may have left some). Changes are
    /// queued from now on; whatever came before is in the caches, or among the deletions
    /// remembered: the main informer's keys, and the keys every `owns`/`watches` relation
    /// maps its cached objects to (an orphaned child wakes its gone owner, as its initial add
    /// does without an election), at [`LOW_PRIORITY`] as the initial list's are; the
    /// deletions remembered, real changes, at 0.
    fn begin_term(&self, term: &Term) {
        self.reconciling.store(true, Ordering::Release);
        for key in self.main.lister().keys() {
            self.queue.add_with_priority(Arc::from(key), LOW_PRIORITY);
        }
        for keys in &self.related_keys {
            for (key, _) in keys(None) {
                self.queue.add_with_priority(Arc::from(key), LOW_PRIORITY);
            }
        }
        let (gone, forgotten) = self.deleted.lock().term_begins();
        let remembered = gone.len();
        for key in gone {
            self.queue.add_with_priority(key, priority(Change::Deleted));
        }
        tracing::info!(
            term = term.number,
            deletions = remembered,
            forgotten,
            "leading: reconciling (deletions: remembered while standing by, queued; \
             forgotten: seen while standing by, over the limit)"
        );
    }
}
