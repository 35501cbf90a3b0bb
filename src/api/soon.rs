//! Deadlines on the HTTP worker that arm no timer for work done at once.
//!
//! Tokio's `timeout_at` registers its timer on the first poll that finds the work
//! pending, and registering a timer due before the one the runtime last slept towards
//! wakes the runtime's driver: a write to its eventfd, even from the runtime's own thread
//! while it runs. A refused request's body (taken off its connection within 2 ms) and a
//! small body being read are pending on their first poll only because the HTTP worker
//! feeds the body to the handler right after calling it; under a 20,000 requests/s burst
//! that timer was one `write` for nine requests in ten (89% of them `edge::discard`'s,
//! 4% the read's; `perf record -e syscalls:sys_enter_write` of the worker's thread).
//!
//! [`by`] polls the work once more before it arms the timer: a first poll that finds it
//! pending asks for a second at once (a wake of the running task, which is a push to the
//! worker's own queue), and only a second pending poll arms the timer, at the same
//! deadline. Work that comes late waits as long as it would have; work done by its second
//! poll costs no timer.

use std::future::Future;
use std::pin::pin;
use std::task::Poll;

use tokio::time::Instant;

/// The output of `work` if it finishes by `deadline`, `None` past it; as
/// `tokio::time::timeout_at`, except that the timer is armed only if `work` is still
/// pending on its second poll.
pub async fn by<F: Future>(deadline: Instant, work: F) -> Option<F::Output> {
    let mut work = pin!(work);
    let mut polls = 0u8;
    let early = std::future::poll_fn(|cx| match work.as_mut().poll(cx) {
        Poll::Ready(output) => Poll::Ready(Some(output)),
        Poll::Pending if polls == 0 => {
            polls += 1;
            // Polled again as soon as the worker has fed what it holds: the second look
            // costs a turn of its queue, where a timer cost a system call.
            cx.waker().wake_by_ref();
            Poll::Pending
        }
        Poll::Pending => Poll::Ready(None),
    })
    .await;
    match early {
        Some(output) => Some(output),
        None => tokio::time::timeout_at(deadline, work).await.ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A future pending on its first `pending` polls, then ready, counting its polls.
    struct ReadyAfter {
        pending: u32,
        polls: std::rc::Rc<std::cell::Cell<u32>>,
    }

    impl Future for ReadyAfter {
        type Output = u32;
        fn poll(self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<u32> {
            let polls = self.polls.get() + 1;
            self.polls.set(polls);
            if polls > self.pending {
                Poll::Ready(polls)
            } else {
                // Whoever would feed it later wakes it; here, at once.
                cx.waker().wake_by_ref();
                Poll::Pending
            }
        }
    }

    fn counted(pending: u32) -> (ReadyAfter, std::rc::Rc<std::cell::Cell<u32>>) {
        let polls = std::rc::Rc::new(std::cell::Cell::new(0));
        let work = ReadyAfter {
            pending,
            polls: polls.clone(),
        };
        (work, polls)
    }

    /// The timer is not looked at, hence not armed, before the second poll: a deadline
    /// already past does not refuse work done by then (`tokio::time::timeout_at`, which
    /// arms it on the first pending poll, gives such work up).
    #[tokio::test(start_paused = true)]
    async fn work_done_by_its_second_poll_is_not_judged_by_the_timer() {
        for pending in 0..=1 {
            let (work, polls) = counted(pending);
            assert_eq!(by(Instant::now(), work).await, Some(pending + 1));
            assert_eq!(polls.get(), pending + 1);
        }
        let (work, polls) = counted(3);
        assert_eq!(
            by(Instant::now(), work).await,
            None,
            "pending on its third poll too"
        );
        assert_eq!(
            polls.get(),
            3,
            "looked at once more with the timer, as timeout_at does"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn work_pending_past_its_second_poll_still_gets_it_by_the_deadline() {
        let (work, _) = counted(5);
        let deadline = Instant::now() + Duration::from_millis(2);
        assert_eq!(by(deadline, work).await, Some(6));
        assert!(Instant::now() < deadline);
    }

    #[tokio::test(start_paused = true)]
    async fn work_that_never_comes_is_given_up_at_the_deadline_not_later() {
        let start = Instant::now();
        let deadline = start + Duration::from_millis(2);
        let never = std::future::pending::<()>();
        let outcome = tokio::time::timeout(Duration::from_secs(1), by(deadline, never)).await;
        assert_eq!(
            outcome,
            Ok(None),
            "given up by its own deadline, not the test's"
        );
        assert!(Instant::now() >= deadline);
        assert!(Instant::now() < deadline + Duration::from_millis(2));
    }

    #[tokio::test(start_paused = true)]
    async fn work_that_comes_before_the_deadline_is_kept() {
        let deadline = Instant::now() + Duration::from_millis(5);
        let late = tokio::time::sleep(Duration::from_millis(3));
        assert_eq!(by(deadline, late).await, Some(()));
        let later = tokio::time::sleep(Duration::from_millis(10));
        assert_eq!(
            by(Instant::now() + Duration::from_millis(5), later).await,
            None
        );
    }
}
