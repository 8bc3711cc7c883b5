//! The delivery pool: a small, fixed set of threads that runs every informer's synchronous work
//! (the pop loops applying changes to the caches, which run index functions, and the
//! synchronous event handlers), so the number of OS threads does not grow with the number of
//! informers or handlers.
//!
//! Work is split into *jobs*. A job is scheduled when it has work (a queue write, a buffered
//! notification), runs on one pool thread at a time, does a bounded amount of work per turn and
//! then goes to the back of the line, so a busy job does not starve the others. A job is never
//! run by two threads at once, and a schedule while it runs makes it run again: no wake-up is
//! lost.
//!
//! User code can block (a synchronous handler doing I/O). A monitor notices a pool thread that
//! has been inside one job for longer than [`STUCK_AFTER`] while other jobs wait, and starts a
//! spare thread for them, so one blocked handler does not hold up another; spare threads leave
//! once they have been idle for [`SPARE_IDLE`]. The pool therefore has `size` threads plus the
//! monitor, plus one for each job that is blocked at the moment.

use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use informer_store::panic_message;
use parking_lot::Mutex;

/// How long a pool thread may stay inside one job, while other jobs wait, before the monitor
/// starts a spare thread for them.
pub const STUCK_AFTER: Duration = Duration::from_millis(50);

/// How long a spare thread waits for work before it leaves.
pub const SPARE_IDLE: Duration = Duration::from_secs(2);

/// How often the monitor looks for stuck threads while any job is running.
const MONITOR_TICK: Duration = Duration::from_millis(10);

/// The most spare threads a pool starts: past that many handlers blocked at once, the others
/// wait for one of them to return.
pub const MAX_SPARES: usize = 64;

/// What a job's turn ended with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Turn {
    /// Nothing more to do until scheduled again.
    Idle,
    /// More work is ready: run again after the jobs already waiting.
    More,
    /// The job has finished for good; schedules are ignored from now on.
    Done,
}

/// A unit of synchronous work the pool runs.
pub(crate) trait Job: Send + Sync + 'static {
    /// Does a bounded amount of work. Never called by two threads at once.
    fn run(&self) -> Turn;

    /// The job's scheduling state.
    fn slot(&self) -> &Slot;

    /// Called instead of another turn if `run` panicked (the job is then done).
    fn panicked(&self, message: &str);
}

const IDLE: u8 = 0;
const QUEUED: u8 = 1;
const RUNNING: u8 = 2;
/// Running, and scheduled again meanwhile: it runs once more when this turn ends.
const NOTIFIED: u8 = 3;
const DONE: u8 = 4;

/// A job's scheduling state.
#[derive(Debug, Default)]
pub(crate) struct Slot(AtomicU8);

impl Slot {
    pub(crate) fn new() -> Self {
        Self(AtomicU8::new(IDLE))
    }
}

/// Counts one job alive on its pool, until dropped.
pub(crate) struct JobToken(Arc<AtomicUsize>);

impl Drop for JobToken {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A pool of threads running the informers' synchronous work (see the module docs): pop loops
/// and synchronous handlers. [`DeliveryPool::global`] serves every informer unless one is
/// given its own with
/// [`InformerBuilder::pool`](crate::InformerBuilder::pool).
pub struct DeliveryPool {
    shared: Arc<Shared>,
}

impl fmt::Debug for DeliveryPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeliveryPool")
            .field("size", &self.shared.size)
            .field("threads", &self.threads())
            .finish()
    }
}

struct Shared {
    size: usize,
    ready_tx: Sender<Arc<dyn Job>>,
    ready_rx: Receiver<Arc<dyn Job>>,
    /// One entry per pool thread (core and spare): when it entered its current job, in
    /// nanoseconds since `epoch` plus one; 0 when it is not inside a job.
    busy: Mutex<Vec<Arc<AtomicU64>>>,
    threads: AtomicUsize,
    running: AtomicUsize,
    /// Jobs alive (see [`JobToken`]).
    jobs: Arc<AtomicUsize>,
    epoch: Instant,
    /// Wakes the monitor when a job starts running.
    monitor: Mutex<Option<std::thread::Thread>>,
}

impl DeliveryPool {
    /// The process-wide pool every informer uses unless given another: as many threads as the
    /// machine has cores (at least 2, at most 16), started on first use. Panics if the
    /// operating system refuses to start its threads then (nothing can be delivered without
    /// them); give informers a pool built with [`new`](Self::new) to handle that error.
    pub fn global() -> &'static Arc<DeliveryPool> {
        static GLOBAL: OnceLock<Arc<DeliveryPool>> = OnceLock::new();
        GLOBAL.get_or_init(|| {
            let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
            Arc::new(
                DeliveryPool::new(cores.clamp(2, 16))
                    .expect("could not start the informers' delivery threads"),
            )
        })
    }

    /// A pool of `size` threads (at least 1) plus its monitor. Its threads leave once the last
    /// handle on the pool, and every job it holds, are gone.
    pub fn new(size: usize) -> std::io::Result<Self> {
        let size = size.max(1);
        let (ready_tx, ready_rx) = crossbeam_channel::unbounded();
        let shared = Arc::new(Shared {
            size,
            ready_tx,
            ready_rx,
            busy: Mutex::new(Vec::new()),
            threads: AtomicUsize::new(0),
            running: AtomicUsize::new(0),
            jobs: Arc::new(AtomicUsize::new(0)),
            epoch: Instant::now(),
            monitor: Mutex::new(None),
        });
        for i in 0..size {
            Shared::spawn_worker(&shared, format!("informer-pool-{i}"), false)?;
        }
        let weak = Arc::downgrade(&shared);
        let monitor = std::thread::Builder::new()
            .name("informer-monitor".into())
            .spawn(move || monitor(weak))?;
        *shared.monitor.lock() = Some(monitor.thread().clone());
        Ok(Self { shared })
    }

    /// The threads the pool has now (core and spare; the monitor not included).
    pub fn threads(&self) -> usize {
        self.shared.threads.load(Ordering::Acquire)
    }

    /// The number of core threads.
    pub fn size(&self) -> usize {
        self.shared.size
    }

    /// The jobs alive on this pool: one per running informer's pop loop and per synchronous
    /// handler. Zero once every informer on it has stopped and its handlers have ended.
    pub fn jobs(&self) -> usize {
        self.shared.jobs.load(Ordering::Acquire)
    }

    /// Counts a job alive until the token is dropped (with the job).
    pub(crate) fn track(&self) -> JobToken {
        self.shared.jobs.fetch_add(1, Ordering::AcqRel);
        JobToken(Arc::clone(&self.shared.jobs))
    }

    /// Schedules `job`: it runs soon unless it is queued already; if it is running, it runs
    /// once more after this turn.
    pub(crate) fn schedule(&self, job: &Arc<dyn Job>) {
        let slot = &job.slot().0;
        let mut state = slot.load(Ordering::Acquire);
        loop {
            let next = match state {
                IDLE => QUEUED,
                RUNNING => NOTIFIED,
                _ => return,
            };
            match slot.compare_exchange_weak(state, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => break,
                Err(now) => state = now,
            }
        }
        if state == IDLE {
            // The receiver lives as long as `shared`, which `self` holds.
            let _ = self.shared.ready_tx.send(Arc::clone(job));
        }
    }
}

impl Drop for DeliveryPool {
    fn drop(&mut self) {
        if let Some(monitor) = self.shared.monitor.lock().take() {
            monitor.unpark();
        }
    }
}

impl Shared {
    fn spawn_worker(shared: &Arc<Self>, name: String, spare: bool) -> std::io::Result<()> {
        let busy = Arc::new(AtomicU64::new(0));
        shared.busy.lock().push(Arc::clone(&busy));
        shared.threads.fetch_add(1, Ordering::AcqRel);
        let weak = Arc::downgrade(shared);
        let rx = shared.ready_rx.clone();
        let spawned = std::thread::Builder::new()
            .name(name)
            .spawn(move || worker(weak, rx, busy, spare));
        if spawned.is_err() {
            shared.threads.fetch_sub(1, Ordering::AcqRel);
        }
        spawned.map(drop)
    }

    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX - 1) + 1
    }

    /// Runs one turn of `job` and reschedules it as its turn asks.
    fn run_turn(&self, job: Arc<dyn Job>) {
        let slot = &job.slot().0;
        if slot
            .compare_exchange(QUEUED, RUNNING, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return;
        }
        let turn = catch_unwind(AssertUnwindSafe(|| job.run())).unwrap_or_else(|panic| {
            job.panicked(panic_message(&*panic));
            Turn::Done
        });
        match turn {
            Turn::Done => slot.store(DONE, Ordering::Release),
            Turn::More => {
                slot.store(QUEUED, Ordering::Release);
                let _ = self.ready_tx.send(job);
            }
            Turn::Idle => {
                if slot
                    .compare_exchange(RUNNING, IDLE, Ordering::AcqRel, Ordering::Acquire)
                    .is_err()
                {
                    // Scheduled while it ran.
                    slot.store(QUEUED, Ordering::Release);
                    let _ = self.ready_tx.send(job);
                }
            }
        }
    }
}

fn worker(shared: Weak<Shared>, rx: Receiver<Arc<dyn Job>>, busy: Arc<AtomicU64>, spare: bool) {
    loop {
        let job = if spare {
            match rx.recv_timeout(SPARE_IDLE) {
                Ok(job) => job,
                Err(RecvTimeoutError::Timeout) => break,
                Err(RecvTimeoutError::Disconnected) => break,
            }
        } else {
            match rx.recv_timeout(SPARE_IDLE) {
                Ok(job) => job,
                Err(RecvTimeoutError::Timeout) => {
                    if shared.strong_count() == 0 {
                        break;
                    }
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => break,
            }
        };
        let Some(pool) = shared.upgrade() else {
            break;
        };
        busy.store(pool.now(), Ordering::Release);
        if pool.running.fetch_add(1, Ordering::AcqRel) == 0
            && let Some(monitor) = &*pool.monitor.lock()
        {
            monitor.unpark();
        }
        pool.run_turn(job);
        pool.running.fetch_sub(1, Ordering::AcqRel);
        busy.store(0, Ordering::Release);
    }
    if let Some(pool) = shared.upgrade() {
        pool.threads.fetch_sub(1, Ordering::AcqRel);
        pool.busy.lock().retain(|b| !Arc::ptr_eq(b, &busy));
    }
}

/// Starts a spare thread when every thread is inside a job, jobs are waiting, and more threads
/// have been inside their job for longer than [`STUCK_AFTER`] than there are spares (each
/// stuck thread gets at most one stand-in, so a machine too busy to run the threads does not
/// breed more of them), up to [`MAX_SPARES`]. Sleeps while no job runs.
fn monitor(shared: Weak<Shared>) {
    let mut spares = 0u64;
    loop {
        let Some(pool) = shared.upgrade() else {
            return;
        };
        if pool.running.load(Ordering::Acquire) == 0 {
            drop(pool);
            std::thread::park_timeout(SPARE_IDLE);
            continue;
        }
        if !pool.ready_rx.is_empty() {
            let now = pool.now();
            let stuck_after = u64::try_from(STUCK_AFTER.as_nanos()).unwrap_or(u64::MAX);
            let (all_busy, stuck) = {
                let busy = pool.busy.lock();
                let mut all_busy = true;
                let mut stuck = 0;
                for b in busy.iter() {
                    let since = b.load(Ordering::Acquire);
                    if since == 0 {
                        all_busy = false;
                    } else if now.saturating_sub(since) >= stuck_after {
                        stuck += 1;
                    }
                }
                (all_busy, stuck)
            };
            let spares_alive = pool
                .threads
                .load(Ordering::Acquire)
                .saturating_sub(pool.size);
            if all_busy && stuck > spares_alive && spares_alive < MAX_SPARES {
                spares += 1;
                if let Err(error) =
                    Shared::spawn_worker(&pool, format!("informer-spare-{spares}"), true)
                {
                    tracing::error!(%error, "could not start a spare delivery thread");
                }
            }
        }
        drop(pool);
        std::thread::sleep(MONITOR_TICK);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    struct Counter {
        slot: Slot,
        runs: AtomicUsize,
        /// Turns that ask for more before going idle.
        more: AtomicUsize,
        concurrent: AtomicBool,
        overlapped: AtomicBool,
    }

    impl Counter {
        /// A counting job that asks for `more` extra turns before going idle.
        fn new(more: usize) -> Arc<Self> {
            Arc::new(Counter {
                slot: Slot::new(),
                runs: AtomicUsize::new(0),
                more: AtomicUsize::new(more),
                concurrent: AtomicBool::new(false),
                overlapped: AtomicBool::new(false),
            })
        }
    }

    impl Job for Counter {
        fn run(&self) -> Turn {
            if self.concurrent.swap(true, Ordering::AcqRel) {
                self.overlapped.store(true, Ordering::Release);
            }
            self.runs.fetch_add(1, Ordering::AcqRel);
            std::thread::yield_now();
            self.concurrent.store(false, Ordering::Release);
            if self
                .more
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |m| m.checked_sub(1))
                .is_ok()
            {
                Turn::More
            } else {
                Turn::Idle
            }
        }
        fn slot(&self) -> &Slot {
            &self.slot
        }
        fn panicked(&self, _: &str) {}
    }

    fn wait_until(what: &str, f: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !f() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn a_job_runs_on_one_thread_at_a_time_and_no_schedule_is_lost() {
        let pool = DeliveryPool::new(4).unwrap();
        let job = Counter::new(0);
        let dyn_job: Arc<dyn Job> = job.clone();
        for _ in 0..10_000 {
            pool.schedule(&dyn_job);
        }
        // Every schedule after the last turn began has a turn after it; wait for the runs to
        // stop growing, then schedule once more and see one more turn.
        wait_until("the job to go idle", || {
            job.slot.0.load(Ordering::Acquire) == IDLE
        });
        let before = job.runs.load(Ordering::Acquire);
        pool.schedule(&dyn_job);
        wait_until("one more turn", || {
            job.runs.load(Ordering::Acquire) > before
        });
        assert!(!job.overlapped.load(Ordering::Acquire));
    }

    #[test]
    fn more_runs_the_job_again() {
        let pool = DeliveryPool::new(1).unwrap();
        let job = Counter::new(5);
        let dyn_job: Arc<dyn Job> = job.clone();
        pool.schedule(&dyn_job);
        wait_until("six turns", || job.runs.load(Ordering::Acquire) == 6);
    }

    struct Blocking {
        slot: Slot,
        release: Mutex<Option<Receiver<()>>>,
        entered: AtomicBool,
    }

    impl Job for Blocking {
        fn run(&self) -> Turn {
            self.entered.store(true, Ordering::Release);
            if let Some(rx) = self.release.lock().take() {
                let _ = rx.recv();
            }
            Turn::Idle
        }
        fn slot(&self) -> &Slot {
            &self.slot
        }
        fn panicked(&self, _: &str) {}
    }

    /// One thread, blocked forever in one job: the monitor starts a spare, which runs the
    /// other job.
    #[test]
    fn a_blocked_job_does_not_hold_up_the_others() {
        let pool = DeliveryPool::new(1).unwrap();
        let (release, rx) = crossbeam_channel::bounded(1);
        let blocked: Arc<dyn Job> = Arc::new(Blocking {
            slot: Slot::new(),
            release: Mutex::new(Some(rx)),
            entered: AtomicBool::new(false),
        });
        pool.schedule(&blocked);
        let other = Counter::new(0);
        let other_dyn: Arc<dyn Job> = other.clone();
        pool.schedule(&other_dyn);
        wait_until("the other job to run", || {
            other.runs.load(Ordering::Acquire) == 1
        });
        assert!(pool.threads() >= 2, "a spare thread ran it");
        release.send(()).unwrap();
        // The spare leaves once idle.
        wait_until("the spare to leave", || pool.threads() == 1);
    }

    struct Panics {
        slot: Slot,
        told: AtomicBool,
    }

    impl Job for Panics {
        fn run(&self) -> Turn {
            panic!("boom");
        }
        fn slot(&self) -> &Slot {
            &self.slot
        }
        fn panicked(&self, message: &str) {
            assert_eq!(message, "boom");
            self.told.store(true, Ordering::Release);
        }
    }

    #[test]
    fn a_panicking_job_is_done_and_the_thread_goes_on() {
        let pool = DeliveryPool::new(1).unwrap();
        let job = Arc::new(Panics {
            slot: Slot::new(),
            told: AtomicBool::new(false),
        });
        let dyn_job: Arc<dyn Job> = job.clone();
        pool.schedule(&dyn_job);
        wait_until("the job to be done", || {
            job.slot.0.load(Ordering::Acquire) == DONE
        });
        assert!(job.told.load(Ordering::Acquire));
        // Scheduling a finished job does nothing; the thread still serves others.
        pool.schedule(&dyn_job);
        let other = Counter::new(0);
        let other_dyn: Arc<dyn Job> = other.clone();
        pool.schedule(&other_dyn);
        wait_until("the other job to run", || {
            other.runs.load(Ordering::Acquire) == 1
        });
        assert_eq!(pool.threads(), 1);
    }
}
