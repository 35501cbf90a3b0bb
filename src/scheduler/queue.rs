//! A model's queue of waiting requests, kept in deadline order.

use std::collections::VecDeque;

use crate::model::RequestId;
use crate::time::Nanos;

/// A request waiting to be batched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Queued {
    pub id: RequestId,
    /// Internal deadline: when its execution must end, with the safety buffer taken off.
    pub deadline: Nanos,
    /// When its answer is due (arrival + SLO); a result after this is late.
    pub due: Nanos,
    /// Its share of the model's load demand (parts per million of a device).
    pub demand: u64,
}

/// Waiting requests of one model, earliest deadline first.
#[derive(Debug, Default)]
pub struct ModelQueue {
    items: VecDeque<Queued>,
    /// Sum of the items' demand.
    demand: u64,
}

impl ModelQueue {
    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn demand(&self) -> u64 {
        self.demand
    }

    pub fn front(&self) -> Option<&Queued> {
        self.items.front()
    }

    pub fn back(&self) -> Option<&Queued> {
        self.items.back()
    }

    /// Inserts in deadline order; equal deadlines keep arrival order. Requests mostly
    /// arrive in deadline order, so the search from the back is usually one step.
    pub fn push(&mut self, item: Queued) {
        let at = self
            .items
            .iter()
            .rposition(|q| q.deadline <= item.deadline)
            .map_or(0, |i| i + 1);
        self.demand += item.demand;
        self.items.insert(at, item);
    }

    /// Removes the request `id`, if queued.
    pub fn remove(&mut self, id: RequestId) -> Option<Queued> {
        let at = self.items.iter().position(|q| q.id == id)?;
        let item = self.items.remove(at)?;
        self.demand -= item.demand;
        Some(item)
    }

    pub fn pop_front(&mut self) -> Option<Queued> {
        let item = self.items.pop_front()?;
        self.demand -= item.demand;
        Some(item)
    }

    /// Number of requests whose deadline is before `time` (they are at the front).
    pub fn count_before(&self, time: Nanos) -> usize {
        self.items.partition_point(|q| q.deadline < time)
    }

    /// Removes `n` requests after the `skip` most urgent ones.
    pub fn take_range(&mut self, skip: usize, n: usize) -> Vec<Queued> {
        let end = (skip + n).min(self.items.len());
        let taken: Vec<Queued> = self.items.drain(skip.min(end)..end).collect();
        self.demand -= taken.iter().map(|q| q.demand).sum::<u64>();
        taken
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(id: u64, deadline: Nanos) -> Queued {
        Queued {
            id: RequestId(id),
            deadline,
            due: deadline,
            demand: 10,
        }
    }

    #[test]
    fn keeps_deadline_order_and_demand() {
        let mut queue = ModelQueue::default();
        for (id, deadline) in [(1, 30), (2, 10), (3, 30), (4, 20)] {
            queue.push(q(id, deadline));
        }
        assert_eq!(queue.demand(), 40);
        let ids: Vec<u64> = queue.take_range(0, 4).iter().map(|q| q.id.0).collect();
        assert_eq!(ids, vec![2, 4, 1, 3]);
        assert_eq!(queue.demand(), 0);
    }

    #[test]
    fn ranges_skip_the_most_urgent() {
        let mut queue = ModelQueue::default();
        for (id, deadline) in [(1, 10), (2, 20), (3, 30), (4, 40)] {
            queue.push(q(id, deadline));
        }
        assert_eq!(queue.count_before(25), 2);
        let ids: Vec<u64> = queue.take_range(1, 2).iter().map(|q| q.id.0).collect();
        assert_eq!(ids, vec![2, 3]);
        assert_eq!(queue.demand(), 20);
        assert_eq!(queue.front().map(|q| q.id.0), Some(1));
    }

    #[test]
    fn take_is_bounded_by_length() {
        let mut queue = ModelQueue::default();
        queue.push(q(1, 5));
        assert_eq!(queue.take_range(0, 8).len(), 1);
        assert!(queue.pop_front().is_none());
    }
}
