//! Who counts a request's answer in the metrics: exactly one of the front end, by the answer
//! its client got, and the actor that answered it (the controller, or a pipeline's actor
//! for a root), by the outcome it published.
//!
//! Why both can: the front end may answer otherwise than the controller. It refuses a
//! request `overran` at its deadline when the controller's answer has not come (its batch
//! ran longer than planned); the controller finishes it later, late or in time by its own
//! reckoning, and publishes that. Counted by both, such a request was two answers in
//! `clockwork_requests`, one of them a `late` that no client was ever sent. A pipeline's
//! root and its actor are the same.
//!
//! So a request the front end hands on carries a [`Tally`]. The front end marks it once it
//! has the answer it will give ([`Tally::by_front`]) and counts that answer itself; if it
//! lets the request go without an answer (its client left), it marks it [`Tally::left`],
//! and the published outcome is the one counted. The metrics count the published event
//! only in that second case, and hold ([`Held`]) an event that comes before either until
//! the front end decides (it always does: at the latest when it drops the request). A
//! request without a tally (a pipeline's sub-request, an in-process caller's) is counted
//! by its event. This is a ground module: it uses nothing else of the crate.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// The front end has not decided yet.
const OPEN: u8 = 0;
/// The front end counts the answer it gives.
const BY_FRONT: u8 = 1;
/// The front end gave no answer: the published outcome counts.
const LEFT: u8 = 2;

/// Who counts a request's answer, as far as the front end has decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counter {
    /// Not decided yet: the front end still waits for the answer, or is about to send it.
    Undecided,
    /// The front end, by the answer its client got.
    Front,
    /// The published event, by its outcome: the client left before its answer.
    Event,
}

/// One request's [`Counter`], shared by the front end and the event of its answer.
#[derive(Clone, Debug, Default)]
pub struct Tally(Arc<AtomicU8>);

impl Tally {
    /// A tally the front end has not decided yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The front end has the answer it will give (the controller's, or its own refusal)
    /// and counts it. Once the front end has let the request go, nothing changes.
    pub fn by_front(&self) {
        let _ = self
            .0
            .compare_exchange(OPEN, BY_FRONT, Ordering::AcqRel, Ordering::Acquire);
    }

    /// The front end lets the request go without an answer. Once it has counted one,
    /// nothing changes.
    pub fn left(&self) {
        let _ = self
            .0
            .compare_exchange(OPEN, LEFT, Ordering::AcqRel, Ordering::Acquire);
    }

    /// Who counts the answer now.
    pub fn counter(&self) -> Counter {
        match self.0.load(Ordering::Acquire) {
            OPEN => Counter::Undecided,
            BY_FRONT => Counter::Front,
            _ => Counter::Event,
        }
    }
}

/// The answers published before their front end decided who counts them, kept until it
/// has. At most the requests the front end has handed on and not yet answered.
#[derive(Debug)]
pub struct Held<E> {
    events: Mutex<Vec<(Tally, E)>>,
}

impl<E> Default for Held<E> {
    fn default() -> Self {
        Self {
            events: Mutex::default(),
        }
    }
}

impl<E> Held<E> {
    /// Whether the event of an answer with `tally` (none: the event counts) is to be
    /// counted now; one whose front end has not decided is kept (`event` made only then)
    /// for [`Held::settle`].
    pub fn counts_now(&self, tally: Option<&Tally>, event: impl FnOnce() -> E) -> bool {
        let Some(tally) = tally else {
            return true;
        };
        match tally.counter() {
            Counter::Event => true,
            Counter::Front => false,
            Counter::Undecided => {
                self.lock().push((tally.clone(), event()));
                false
            }
        }
    }

    /// The kept events whose front end has since let its request go, to be counted now;
    /// those it counted itself are dropped, the undecided kept. (A decision is final, so
    /// reading it twice reads the same.)
    pub fn settle(&self) -> Vec<E> {
        let mut events = self.lock();
        let decided = events.extract_if(.., |(tally, _)| tally.counter() != Counter::Undecided);
        decided
            .filter(|(tally, _)| tally.counter() == Counter::Event)
            .map(|(_, event)| event)
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(Tally, E)>> {
        self.events.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_decision_stands() {
        let counted = Tally::new();
        assert_eq!(counted.counter(), Counter::Undecided);
        let event = counted.clone();
        counted.by_front();
        counted.left();
        assert_eq!(event.counter(), Counter::Front);

        let gone = Tally::new();
        gone.left();
        gone.by_front();
        assert_eq!(gone.counter(), Counter::Event);
    }

    /// Mutation that breaks it: `settle` counting the events the front end counted.
    #[test]
    fn an_event_is_held_until_its_front_end_decides() {
        let held = Held::default();
        assert!(held.counts_now(None, || 0), "no tally: the event counts");
        let (answered, left, waiting) = (Tally::new(), Tally::new(), Tally::new());
        for (n, tally) in [&answered, &left, &waiting].into_iter().enumerate() {
            assert!(!held.counts_now(Some(tally), || n), "undecided: held");
        }
        answered.by_front();
        left.left();
        assert_eq!(held.settle(), vec![1], "the one whose client left");
        assert!(held.settle().is_empty());
        waiting.by_front();
        assert!(held.settle().is_empty(), "counted by its front end");
        assert!(held.lock().is_empty());
        assert!(!held.counts_now(Some(&answered), || 9));
        assert!(held.counts_now(Some(&left), || 9));
        assert!(held.lock().is_empty(), "decided events are never held");
    }
}
