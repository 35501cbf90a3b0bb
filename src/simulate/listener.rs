//! The simulator's subscriber to the runtime's events: it hands each event to the
//! recorder as it comes, and when the run is over takes every event still queued before it
//! stops, so the report counts every action the runtime published.
//!
//! The controller keeps publishing until its actor is dropped, so the channel does not
//! close when a run ends; the listener is told to stop instead, and then drains.

use tokio::sync::broadcast::error::{RecvError, TryRecvError};
use tokio::sync::broadcast::Receiver;
use tokio::sync::oneshot;

/// A running listener; [`Listener::finish`] stops it after the last queued event.
pub(super) struct Listener {
    stop: oneshot::Sender<()>,
    task: actix_rt::task::JoinHandle<u64>,
}

impl Listener {
    /// Spawns the listener on the current actix system: `sink` gets every event of
    /// `events`, in order.
    pub(super) fn spawn<T: Clone + 'static>(
        mut events: Receiver<T>,
        mut sink: impl FnMut(T) + 'static,
    ) -> Self {
        let (stop, mut stopped) = oneshot::channel();
        let task = actix_rt::spawn(async move {
            let mut lost = 0;
            loop {
                tokio::select! {
                    // Events first: a stop never overtakes an event that is ready.
                    biased;
                    event = events.recv() => match event {
                        Ok(event) => sink(event),
                        Err(RecvError::Lagged(n)) => lost += n,
                        Err(RecvError::Closed) => return lost,
                    },
                    _ = &mut stopped => break,
                }
            }
            // Everything published before the stop is queued here: take it all.
            loop {
                match events.try_recv() {
                    Ok(event) => sink(event),
                    Err(TryRecvError::Lagged(n)) => lost += n,
                    Err(TryRecvError::Empty | TryRecvError::Closed) => return lost,
                }
            }
        });
        Self { stop, task }
    }

    /// Stops the listener once it has taken every event published so far; returns how
    /// many events it lost by falling behind (the channel's backlog overflowed).
    pub(super) async fn finish(self) -> u64 {
        // A send error means the task already ended (the channel closed): nothing to stop.
        let _ = self.stop.send(());
        match self.task.await {
            Ok(lost) => lost,
            // Nobody aborts the task, so it failed by a panic in `sink`: a bug of the
            // recorder, carried on here rather than turned into a count.
            Err(error) => std::panic::resume_unwind(error.into_panic()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::rc::Rc;

    use tokio::sync::broadcast;

    use super::*;

    /// More events than one poll of a task takes (tokio's cooperative budget is 128), all
    /// published without yielding: stopping must still count every one.
    #[test]
    fn every_event_published_before_the_stop_is_counted() {
        actix_rt::System::new().block_on(async {
            let (sender, receiver) = broadcast::channel(4096);
            let seen = Rc::new(Cell::new(0u64));
            let counter = Rc::clone(&seen);
            let listener = Listener::spawn(receiver, move |n: u64| {
                assert_eq!(n, counter.get(), "in order");
                counter.set(n + 1);
            });
            for n in 0..1000u64 {
                sender.send(n).unwrap();
            }
            tokio::task::yield_now().await;
            for n in 1000..2000u64 {
                sender.send(n).unwrap();
            }
            assert_eq!(listener.finish().await, 0, "nothing lost");
            assert_eq!(seen.get(), 2000);
        });
    }

    #[test]
    fn events_lost_to_a_full_backlog_are_counted() {
        actix_rt::System::new().block_on(async {
            let (sender, receiver) = broadcast::channel(16);
            let seen = Rc::new(Cell::new(0u64));
            let counter = Rc::clone(&seen);
            let listener = Listener::spawn(receiver, move |_: u64| counter.set(counter.get() + 1));
            for n in 0..100u64 {
                sender.send(n).unwrap();
            }
            assert_eq!(listener.finish().await, 84);
            assert_eq!(seen.get(), 16);
        });
    }
}
