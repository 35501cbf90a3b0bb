//! The bounded pool that decodes request bodies: at most `threads` decodings at once, at
//! most `queue` waiting, none waiting past its deadline's slack; small bodies are decoded
//! on the HTTP worker itself. Its backlog is part of what the edge checks before reading
//! a body (`DecodePool::expected_wait`).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::Semaphore;

use crate::time::Nanos;

/// Why the pool did not run a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PoolError {
    #[error("{0} requests already wait for a decoder")]
    Full(usize),
    #[error("no decoder was free within the request's slack")]
    NoSlack,
    #[error("the decoding thread failed")]
    Crashed,
}

/// Bodies up to this size are decoded on the HTTP worker itself (holding a decode permit):
/// below it the hop to a blocking thread costs more than the decoding.
pub const INLINE_DECODE_BYTES: usize = 64 << 10;

/// Runs decoding jobs on at most `threads` blocking threads at once, with at most `queue`
/// jobs waiting for one.
pub struct DecodePool {
    permits: Arc<Semaphore>,
    waiting: AtomicUsize,
    queue: usize,
    /// Decoders (the permits' number), to share the backlog among them.
    threads: usize,
    /// The typical decoding time of the jobs waiting, summed ([`DecodePool::expected_wait`]).
    waiting_work: AtomicU64,
}

impl DecodePool {
    pub fn new(threads: usize, queue: usize) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(threads.max(1))),
            waiting: AtomicUsize::new(0),
            queue,
            threads: threads.max(1),
            waiting_work: AtomicU64::new(0),
        }
    }

    /// The time a request arriving now is expected to wait for a decoder: none while one
    /// is free, else the typical work of the jobs already waiting, shared among the
    /// decoders (the ones running may be about to finish). Typical, not least: the
    /// decoders share their cores with the HTTP workers (and on a small host a client),
    /// and drain at the decodings' wall time, not at their best. Counted at their best, a
    /// backlog at less than half the time it took let requests through to be read and
    /// then refused when no decoder was free by their cut-off, 50-200 ms after arrival
    /// (at twice the edge bench's capacity with JSON bodies, a third of its refusals); at
    /// the median, one slow decoding (a stall) hardly moves it (docs/EXPERIMENTS.md, "The
    /// decoders' backlog at their typical pace").
    pub fn expected_wait(&self) -> Nanos {
        if self.permits.available_permits() > 0 {
            return 0;
        }
        self.waiting_work.load(Ordering::Acquire) / self.threads as Nanos
    }

    /// Runs `job` once a decoder is free, unless none is free within `slack` (then the
    /// request could not be decoded in time) or the queue is full; `work` is the typical
    /// time the job takes, counted in [`DecodePool::expected_wait`] while it waits. A
    /// `small` job runs on the calling HTTP worker while it holds its permit: a hop to a
    /// blocking thread costs more than decoding a few kilobytes, and the permit still
    /// bounds how many decode.
    pub async fn run<T: Send + 'static>(
        &self,
        slack: std::time::Duration,
        small: bool,
        work: Nanos,
        job: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, PoolError> {
        let waiting = self.waiting.fetch_add(1, Ordering::AcqRel);
        self.waiting_work.fetch_add(work, Ordering::AcqRel);
        // Counted out on drop too: a client that goes away while its request waits
        // cancels this future, and the count must not keep it (the queue would fill for
        // good).
        let in_queue = InQueue { pool: self, work };
        let permit = if waiting >= self.queue {
            Err(PoolError::Full(waiting))
        } else if let Ok(free) = Arc::clone(&self.permits).try_acquire_owned() {
            // A free decoder, the common case, is taken with no timer (a timer reads the
            // clock). None is free while others wait for one: this does not overtake them.
            Ok(free)
        } else {
            let acquire = Arc::clone(&self.permits).acquire_owned();
            // Released on a decoder's thread: through the worker's relay (`relay.rs`).
            match super::relay::relayed(tokio::time::timeout(slack, acquire)).await {
                Some(Ok(Ok(permit))) => Ok(permit),
                // The semaphore is never closed, and a relay gone is a worker shutting
                // down: no slack, all the same.
                _ => Err(PoolError::NoSlack),
            }
        };
        drop(in_queue);
        let permit = permit?;
        if small {
            let _held = permit;
            return Ok(job());
        }
        let result = actix_web::web::block(move || {
            let _held = permit;
            lower_once();
            job()
        });
        // Finished on a decoder's thread: through the worker's relay (`relay.rs`).
        match super::relay::relayed(result).await {
            Some(Ok(done)) => Ok(done),
            _ => Err(PoolError::Crashed),
        }
    }
}

/// Nice value of the threads that decode: decoding is throughput work on the front-end
/// cores, beside the HTTP workers' latency-critical work (an answer's timer that is due,
/// a refusal, writing an answer). At the same priority a worker woken by an answer waited
/// out a decoding's time slice, and answers left the server past their deadlines (20-35
/// ms past on the edge benchmark's JSON runs); at a lower one, the worker preempts it.
const DECODER_NICE: i32 = 10;

/// Lowers the calling blocking thread to [`DECODER_NICE`], once per thread (the pool's
/// threads are reused; a lowered one stays lowered).
fn lower_once() {
    thread_local! {
        static LOWERED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }
    LOWERED.with(|lowered| {
        if !lowered.replace(true) {
            crate::cores::lower_current(DECODER_NICE);
        }
    });
}

/// One request counted in a pool's queue, with its least decoding time, until dropped.
struct InQueue<'a> {
    pool: &'a DecodePool,
    work: Nanos,
}

impl Drop for InQueue<'_> {
    fn drop(&mut self) {
        self.pool.waiting.fetch_sub(1, Ordering::AcqRel);
        self.pool
            .waiting_work
            .fetch_sub(self.work, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[actix_web::test]
    async fn a_busy_pool_refuses_past_the_slack_and_past_its_queue() {
        let pool = Arc::new(DecodePool::new(1, 1));
        let (hold, release) = std::sync::mpsc::channel::<()>();
        let busy = {
            let pool = Arc::clone(&pool);
            actix_web::rt::spawn(async move {
                pool.run(Duration::from_secs(5), false, 0, move || {
                    release.recv().is_ok()
                })
                .await
            })
        };
        // Let the first job take the only decoder.
        while pool.permits.available_permits() > 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let waited = pool.run(Duration::from_millis(20), false, 0, || ()).await;
        assert_eq!(waited, Err(PoolError::NoSlack));
        pool.waiting.store(1, Ordering::Release); // one waiter already: the queue is full
        let full = pool.run(Duration::from_secs(5), false, 0, || ()).await;
        assert_eq!(full, Err(PoolError::Full(1)));
        pool.waiting.store(0, Ordering::Release);
        hold.send(()).expect("job waits");
        assert_eq!(busy.await.expect("joined"), Ok(true));
        assert_eq!(
            pool.run(Duration::ZERO, true, 0, || 5).await,
            Ok(5),
            "free again"
        );
    }

    /// Mutation that breaks it: `lower_once` not called (the job runs at the worker's
    /// priority).
    #[cfg(target_os = "linux")]
    #[actix_web::test]
    async fn decoding_runs_below_the_workers_priority() {
        let nice = || {
            // SAFETY: getpriority only reads its integer arguments; 0 names this thread.
            unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) }
        };
        let pool = DecodePool::new(1, 1);
        let worker = nice();
        let job = pool.run(Duration::from_secs(5), false, 0, nice).await;
        // Run under a higher nice value already, the test's threads keep it.
        assert_eq!(job, Ok(DECODER_NICE.max(worker)));
        assert_eq!(
            pool.run(Duration::from_secs(5), true, 0, nice).await,
            Ok(worker),
            "an inline decode keeps the worker's priority"
        );
        assert_eq!(nice(), worker, "the worker's own thread keeps its priority");
    }

    /// Mutation that breaks it: `expected_wait` answering 0 always (the check before
    /// reading then ignores the decoders' backlog), or the waiting work not counted out
    /// when a wait ends.
    #[actix_web::test]
    async fn the_expected_wait_is_the_waiting_work_shared_among_the_decoders() {
        let pool = DecodePool::new(2, 8);
        let first = Arc::clone(&pool.permits).acquire_owned().await;
        assert_eq!(pool.expected_wait(), 0, "a decoder is free");
        let second = Arc::clone(&pool.permits).acquire_owned().await;
        assert_eq!(pool.expected_wait(), 0, "busy, and nobody waits");
        let waits = async {
            let a = pool.run(Duration::from_millis(30), false, 6, || ());
            let b = pool.run(Duration::from_millis(30), false, 4, || ());
            futures_util::future::join(a, b).await
        };
        let look = async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            pool.expected_wait()
        };
        let ((a, b), seen) = futures_util::future::join(waits, look).await;
        assert_eq!(seen, 5, "(6 + 4) / 2 decoders");
        assert_eq!((a, b), (Err(PoolError::NoSlack), Err(PoolError::NoSlack)));
        assert_eq!(pool.expected_wait(), 0, "counted out when the waits ended");
        drop((first, second));
    }

    /// Mutation that breaks it: the count taken out after the wait only (as it was), so
    /// a cancelled wait keeps its place in the queue for good.
    #[actix_web::test]
    async fn a_cancelled_wait_leaves_the_queue() {
        let pool = DecodePool::new(1, 1);
        let held = Arc::clone(&pool.permits)
            .acquire_owned()
            .await
            .expect("open");
        let wait = pool.run(Duration::from_secs(5), false, 0, || ());
        // The client goes away while its request waits for a decoder.
        let cancelled = tokio::time::timeout(Duration::from_millis(10), wait).await;
        assert!(cancelled.is_err(), "still waiting when cancelled");
        assert_eq!(pool.waiting.load(Ordering::Acquire), 0);
        drop(held);
        assert_eq!(pool.run(Duration::ZERO, true, 0, || 7).await, Ok(7));
    }
}
