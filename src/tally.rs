//! Who counts a request's answer in the metrics: exactly one of the front end, by the answer
//! its client got, and the controller, by the outcome it published.
//!
//! Why both can: the front end may answer otherwise than the controller. It refuses a
//! request `overran` at its deadline when the controller's answer has not come (its batch
//! ran longer than planned); the controller finishes it later, late or in time by its own
//! reckoning, and publishes that. Counted by both, such a request was two answers in
//! `clockwork_requests`, one of them a `late` that no client was ever sent.
//!
//! So a request the front end hands to the controller carries a [`Tally`]. The front end
//! marks it once it has the answer it will give ([`Tally::by_front`]) and counts that
//! answer itself; if it lets the request go without an answer (its client left), it marks
//! it [`Tally::left`], and the controller's outcome is the one counted. The metrics count
//! the controller's event only in that second case, and hold an event that comes before
//! either until the front end decides (it always does: at the latest when it drops the
//! request). A request without a tally (a pipeline's sub-request, an in-process caller's)
//! is counted by the controller's event. This is a ground module: it uses nothing else of
//! the crate.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

/// The front end has not decided yet.
const OPEN: u8 = 0;
/// The front end counts the answer it gives.
const BY_FRONT: u8 = 1;
/// The front end gave no answer: the controller's outcome counts.
const LEFT: u8 = 2;

/// Who counts a request's answer, as far as the front end has decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counter {
    /// Not decided yet: the front end still waits for the answer, or is about to send it.
    Undecided,
    /// The front end, by the answer its client got.
    Front,
    /// The controller, by the outcome it published: the client left before its answer.
    Controller,
}

/// One request's [`Counter`], shared by the front end and the controller's answer event.
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
            _ => Counter::Controller,
        }
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
        assert_eq!(gone.counter(), Counter::Controller);
    }
}
