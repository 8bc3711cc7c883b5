//! Decoding the objects of one chunk of a protobuf response on several threads.
//!
//! A list page, or the initial events of a streaming list, arrives in chunks of many objects,
//! and decoding them is most of what a sync costs the client. Decoded one after the other on
//! the thread that reads the response, they keep one core busy while the machine's others
//! wait. So the chunks that have arrived are taken together, and when their complete objects
//! come to enough bytes, those are decoded together on a pool of threads the process shares;
//! they are handed on in their order, and an object that cannot be decoded fails the response
//! at the same object as it would on one thread. A watch's events that come one at a time are
//! decoded where they are read.

use std::sync::OnceLock;

use rayon::prelude::*;

/// The pool has a thread per core, up to this many.
const MAX_THREADS: usize = 4;

/// The objects of a chunk are decoded on the pool from this many bytes of them (about 32
/// synthetic pods, or 4 realistic ones: 30–70 µs of decoding). Under it, waking the pool's
/// threads would cost a good part of what they save.
pub(crate) const PARALLEL_FROM: usize = 32 * 1024;

/// A response's chunks that have already arrived are gathered, up to this many bytes, and their
/// objects decoded together: a server writes a watch's frames (a streaming list's initial
/// events) one chunk each, and a list in pieces too, so a chunk alone seldom holds enough.
pub(crate) const GATHER_AT_MOST: usize = 1024 * 1024;

/// A watch gathers up to this many frames for a batch (about a list page): with small objects
/// the byte bound alone would let thousands of decoded objects wait in the batches on the pool
/// while the queue's consumer (a cache that packs them) holds the reader back.
pub(crate) const FRAMES_AT_MOST: usize = 512;

/// The process's decoding threads: none on a machine of one core.
fn pool() -> Option<&'static rayon::ThreadPool> {
    static POOL: OnceLock<Option<rayon::ThreadPool>> = OnceLock::new();
    POOL.get_or_init(|| {
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(MAX_THREADS);
        if threads < 2 {
            return None;
        }
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("informer-decode-{i}"))
            .build()
            .inspect_err(|e| {
                tracing::debug!(error = %e, "no decoding threads, decoding on the reading thread");
            })
            .ok()
    })
    .as_ref()
}

/// `decode` of each of `items`, in their order: on the pool when there is more than one and
/// `bytes` (their size) is at least `from`, else on this thread. This thread waits for the
/// pool meanwhile, as it would have decoded them itself.
pub(crate) fn decode_all<I: Sync, T: Send>(
    items: &[I],
    bytes: usize,
    from: usize,
    decode: impl Fn(&I) -> T + Sync,
) -> Vec<T> {
    if items.len() > 1
        && bytes >= from
        && let Some(pool) = pool()
    {
        return pool.install(|| items.par_iter().map(&decode).collect());
    }
    items.iter().map(decode).collect()
}

/// Whether there are decoding threads ([`spawn`] decodes on them).
pub(crate) fn available() -> bool {
    pool().is_some()
}

/// Items being decoded on the pool while their reader goes on ([`spawn`]): their results, in
/// their order, once every one is decoded, and the data they were decoded from, given back.
pub(crate) struct Batch<T, D>(
    futures::channel::oneshot::Receiver<std::thread::Result<(Vec<T>, D)>>,
);

impl<T, D> Future for Batch<T, D> {
    /// The results and the data, or what the decoding panicked with (a bug in a decoder: it
    /// fails the response rather than the process).
    type Output = Result<(Vec<T>, D), String>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        std::pin::Pin::new(&mut self.0)
            .poll(cx)
            .map(|sent| match sent {
                Ok(Ok(results)) => Ok(results),
                Ok(Err(panic)) => Err(informer_store::panic_message(&*panic).to_owned()),
                Err(futures::channel::oneshot::Canceled) => {
                    Err("the decoding thread stopped".into())
                }
            })
    }
}

/// `decode` of each of `items`, with `data` (the bytes they are in), on the pool, without
/// waiting: the [`Batch`] is ready once every item is decoded, and gives `data` back (to
/// reuse its memory). `None` without a pool (one core), to decode them here.
pub(crate) fn spawn<D, I, T>(
    data: D,
    items: Vec<I>,
    decode: impl Fn(&D, &I) -> T + Send + Sync + 'static,
) -> Option<Batch<T, D>>
where
    D: Send + Sync + 'static,
    I: Send + Sync + 'static,
    T: Send + 'static,
{
    let pool = pool()?;
    let (sender, receiver) = futures::channel::oneshot::channel();
    pool.spawn(move || {
        let decoded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let decoded = items.par_iter().map(|item| decode(&data, item)).collect();
            (decoded, data)
        }));
        // The reader may have gone (its watch stopped): the results go with it.
        let _ = sender.send(decoded);
    });
    Some(Batch(receiver))
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::sync::Mutex;
    use std::thread::ThreadId;

    use super::*;

    /// `decode_all` of 1,000 numbers from `from` bytes, and the threads it decoded on.
    fn run(from: usize) -> (Vec<u64>, HashSet<ThreadId>) {
        let items: Vec<u32> = (0..1000).collect();
        let threads = Mutex::new(HashSet::new());
        let decoded = decode_all(&items, 100, from, |i| {
            threads.lock().unwrap().insert(std::thread::current().id());
            u64::from(*i) * 3
        });
        (decoded, threads.into_inner().unwrap())
    }

    #[test]
    fn every_item_is_decoded_once_in_its_order_on_the_pool_or_here() {
        let expected: Vec<u64> = (0..1000).map(|i| i * 3).collect();
        let here = HashSet::from([std::thread::current().id()]);

        let (decoded, threads) = run(usize::MAX);
        assert_eq!(decoded, expected);
        assert_eq!(threads, here, "under the bytes: on this thread");

        let (decoded, threads) = run(0);
        assert_eq!(decoded, expected);
        if pool().is_some() {
            assert!(threads.is_disjoint(&here), "on the pool: {threads:?}");
        }
        assert!(decode_all::<u32, u64>(&[], 0, 0, |i| u64::from(*i)).is_empty());
    }

    #[test]
    fn a_batch_spawned_is_decoded_in_its_order_off_this_thread() {
        if !available() {
            return;
        }
        let here = std::thread::current().id();
        let data: Vec<u64> = (0..1000).map(|i| i * 3).collect();
        let items: Vec<usize> = (0..1000).rev().collect();
        let batch = spawn(data, items, move |data, i| {
            (data[*i], std::thread::current().id() != here)
        })
        .expect("a pool");
        let (decoded, data) = futures::executor::block_on(batch).expect("decoded");
        let expected: Vec<(u64, bool)> = (0..1000).rev().map(|i| (i * 3, true)).collect();
        assert_eq!(decoded, expected);
        assert_eq!(data[999], 2997, "the data comes back");
    }

    #[test]
    fn a_panic_in_a_spawned_batch_fails_the_batch_not_the_process() {
        if !available() {
            return;
        }
        let batch = spawn((), vec![1, 2, 3], |(), i| {
            assert!(*i != 2, "item {i} cannot be decoded");
            *i
        })
        .expect("a pool");
        let failed = futures::executor::block_on(batch).expect_err("the panic fails it");
        assert!(failed.contains("item 2 cannot be decoded"), "{failed}");
        // The pool goes on.
        let batch = spawn((), vec![1, 2, 3], |(), i| *i * 2).expect("a pool");
        assert_eq!(futures::executor::block_on(batch), Ok((vec![2, 4, 6], ())));
    }
}
