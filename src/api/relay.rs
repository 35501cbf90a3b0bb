//! Work finished on other threads (the controller's answer, a pipeline's, a decoder's
//! result), handed to an HTTP worker's request from the worker's own thread.
//!
//! Why: an actix worker runs its tasks on a tokio `LocalSet`. A task woken from its own
//! thread (a socket ready, a timer due) joins the set's own queue; one woken from another
//! thread joins a shared queue that the set reads only once in 31 turns while its own queue
//! has work. Under overload the worker's own queue is never empty (every connection with a
//! request ready is in it), so each answer the controller sent back waited its turn at one
//! in 31, behind thousands of others: on the two-core overload bench, answers that came back
//! in time were written 100 to 350 ms past the timer that should have ended their wait
//! (the timer's wake-up is the worker's own, but the task was already queued by the
//! answer's, in the slow queue), while the worker's own lag (`lag.rs`) stayed under 60 ms
//! (docs/EXPERIMENTS.md, "Answers woken from another thread").
//!
//! So each worker runs one relay task that awaits all such futures at once: however many of
//! them finish, the worker is woken from outside once (a task already queued is not queued
//! twice), and the relay then completes each request's own channel from the worker's
//! thread, where the wake-up joins the set's own queue. On a thread without a relay (gRPC's,
//! tests) [`relayed`] simply awaits the future.

use std::cell::RefCell;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::task::{Context, Poll, Waker};

use futures_util::future::LocalBoxFuture;
use futures_util::stream::{FuturesUnordered, StreamExt as _};
use futures_util::FutureExt as _;
use tokio::sync::oneshot;

/// The futures a relay awaits, each handing its output to its request.
type Flights = FuturesUnordered<LocalBoxFuture<'static, ()>>;

/// One worker's relay: the futures it awaits and its task's waker.
#[derive(Default)]
struct Relay {
    flights: Flights,
    /// The relay task's waker, from its last poll: a new flight is polled with it at
    /// once, so that a flight that finishes later wakes the relay task.
    waker: Option<Waker>,
}

thread_local! {
    /// This worker's relay; `None` until [`start`] on this thread.
    static RELAY: RefCell<Option<Relay>> = const { RefCell::new(None) };
}

/// Starts the calling worker's relay, once per thread: called where each HTTP worker
/// builds its application (`api::app`), inside the worker's task set.
pub fn start() {
    let started = RELAY.with_borrow_mut(|relay| {
        if relay.is_some() {
            return false;
        }
        *relay = Some(Relay::default());
        true
    });
    if started {
        actix_web::rt::spawn(run());
    }
}

/// Awaits `work` (completed by another thread) through this worker's relay, or here on
/// a thread without one. `None`: the relay went away with its worker (shutdown). `work`
/// is polled by the relay, so it must not itself await through the relay.
pub async fn relayed<F>(work: F) -> Option<F::Output>
where
    F: Future + 'static,
{
    if !RELAY.with_borrow(Option::is_some) {
        return Some(work.await);
    }
    let (done, answer) = oneshot::channel();
    let flight = async move {
        // A panic in `work` ends this flight alone (its request then finds the relay
        // gone), never the relay task every other request on the worker waits through.
        if let Ok(output) = AssertUnwindSafe(work).catch_unwind().await {
            // The request may be gone (its client hung up): nothing to hand over then.
            let _ = done.send(output);
        }
    };
    RELAY.with_borrow_mut(|relay| {
        let Some(relay) = relay.as_mut() else {
            return;
        };
        relay.flights.push(flight.boxed_local());
        // Polled once now, as the relay task would (with its waker), so that the flight
        // registers its own: waking the relay task for it cost a task's turn per request.
        if let Some(waker) = &relay.waker {
            poll_flights(&mut relay.flights, &mut Context::from_waker(waker));
        }
    });
    answer.await.ok()
}

/// Polls the flights that are ready until none is: `Ready(None)` when none is left,
/// `Pending` when the rest wait (or after a share of them, when the set yields to let
/// other tasks run; it wakes the relay task again).
fn poll_flights(flights: &mut Flights, cx: &mut Context<'_>) {
    while let Poll::Ready(Some(())) = flights.poll_next_unpin(cx) {}
}

/// The relay task: polls every flight that is ready, for as long as the worker runs.
async fn run() {
    std::future::poll_fn(|cx| {
        RELAY.with_borrow_mut(|relay| {
            let Some(relay) = relay.as_mut() else {
                return Poll::Ready(());
            };
            if !relay
                .waker
                .as_ref()
                .is_some_and(|w| w.will_wake(cx.waker()))
            {
                relay.waker = Some(cx.waker().clone());
            }
            poll_flights(&mut relay.flights, cx);
            Poll::Pending
        })
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[actix_web::test]
    async fn answers_from_another_thread_arrive_through_the_relay() {
        start();
        let (tx, rx) = oneshot::channel();
        let sender = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(5));
            tx.send(7).expect("the request waits");
        });
        // Bounded, so that a relay that never delivers fails the test instead of hanging it.
        let answer = tokio::time::timeout(std::time::Duration::from_secs(5), relayed(rx)).await;
        assert_eq!(answer, Ok(Some(Ok(7))));
        sender.join().expect("joined");
    }

    /// Many answers woken from another thread while the worker's own queue always has
    /// work: through the relay they arrive within a few turns of the worker's busy task;
    /// awaited directly, each waits in the slow queue (one in 31 turns), the last after
    /// thousands.
    #[actix_web::test]
    async fn answers_from_another_thread_do_not_wait_behind_the_workers_own_tasks() {
        use std::cell::Cell;
        use std::rc::Rc;
        const ANSWERS: usize = 200;
        start();
        let (senders, receivers): (Vec<_>, Vec<_>) =
            (0..ANSWERS).map(|_| oneshot::channel::<usize>()).unzip();
        let arrived = Rc::new(Cell::new(0));
        for rx in receivers {
            let arrived = Rc::clone(&arrived);
            actix_web::rt::spawn(async move {
                assert!(relayed(rx).await.is_some_and(|r| r.is_ok()));
                arrived.set(arrived.get() + 1);
            });
        }
        // Let each request register its answer.
        tokio::task::yield_now().await;
        // A task that is always ready again, woken from the worker's own thread.
        let turns = Rc::new(Cell::new(0usize));
        let busy = {
            let turns = Rc::clone(&turns);
            actix_web::rt::spawn(std::future::poll_fn(move |cx| {
                turns.set(turns.get() + 1);
                cx.waker().wake_by_ref();
                Poll::<()>::Pending
            }))
        };
        let answering = std::thread::spawn(move || {
            for (n, tx) in senders.into_iter().enumerate() {
                let _ = tx.send(n);
            }
        });
        answering.join().expect("joined");
        let start = turns.get();
        // Bounded too: answers that never come fail the assertion below, not hang it.
        while arrived.get() < ANSWERS && turns.get() - start < 100_000 {
            tokio::task::yield_now().await;
        }
        busy.abort();
        let waited = turns.get() - start;
        // Measured: 43 turns through the relay, 1,447 with each answer awaited directly.
        assert!(
            arrived.get() == ANSWERS && waited < 500,
            "{} of the answers took {waited} turns of the busy task",
            arrived.get()
        );
    }

    #[actix_web::test]
    async fn a_panic_in_one_flight_leaves_the_relay_to_the_others() {
        start();
        let bound = std::time::Duration::from_secs(5);
        let panicked = tokio::time::timeout(bound, relayed(async { panic!("a broken future") }));
        assert_eq!(
            panicked.await,
            Ok(None::<()>),
            "its request finds the relay gone"
        );
        let (tx, rx) = oneshot::channel();
        let sender = std::thread::spawn(move || tx.send(5).expect("the request waits"));
        // Bounded, so that a dead relay fails the test instead of hanging it.
        let next = tokio::time::timeout(bound, relayed(rx)).await;
        assert_eq!(next, Ok(Some(Ok(5))), "the next request is served");
        sender.join().expect("joined");
    }

    #[test]
    fn without_a_relay_the_future_is_awaited_in_place() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        assert_eq!(runtime.block_on(relayed(async { 3 })), Some(3));
    }
}
