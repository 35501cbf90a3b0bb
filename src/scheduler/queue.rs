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
    /// The latest internal finish at which it is still worth serving: its `deadline` for
    /// a model's own request; for a pipeline sub-request, later (its root's deadline
    /// less R_v and the buffer): it is batched and dropped by this, ordered by `deadline`.
    pub latest: Nanos,
    /// When its answer is due (arrival + SLO, or a sub-request's latest useful finish); a
    /// result after this is late.
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
    /// Items whose `latest` is past their `deadline`: while there are none (a model
    /// serving no pipeline), `latest` follows deadline order and the searches below are
    /// binary ones.
    loose: usize,
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
        self.loose += usize::from(item.latest != item.deadline);
        self.items.insert(at, item);
    }

    /// Removes the request `id`, if queued.
    pub fn remove(&mut self, id: RequestId) -> Option<Queued> {
        let at = self.items.iter().position(|q| q.id == id)?;
        let item = self.items.remove(at)?;
        self.took(&item);
        Some(item)
    }

    pub fn pop_front(&mut self) -> Option<Queued> {
        let item = self.items.pop_front()?;
        self.took(&item);
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
        taken.iter().for_each(|q| self.took(q));
        taken
    }

    /// Number of requests that a batch finishing at `finish` would still serve in time
    /// (`latest` not before it).
    pub fn count_meeting(&self, finish: Nanos) -> usize {
        if self.loose == 0 {
            return self.len() - self.count_before(finish);
        }
        self.items.iter().filter(|q| q.latest >= finish).count()
    }

    /// Removes the `n` most urgent requests that a batch finishing at `finish` serves in
    /// time; the others stay queued (for a smaller batch, or until they expire).
    pub fn take_meeting(&mut self, finish: Nanos, n: usize) -> Vec<Queued> {
        if self.loose == 0 {
            return self.take_range(self.count_before(finish), n);
        }
        let mut taken = Vec::with_capacity(n);
        let mut at = 0;
        while taken.len() < n && at < self.items.len() {
            if self.items[at].latest >= finish {
                taken.extend(self.items.remove(at));
            } else {
                at += 1;
            }
        }
        taken.iter().for_each(|q| self.took(q));
        taken
    }

    fn took(&mut self, item: &Queued) {
        self.demand -= item.demand;
        self.loose -= usize::from(item.latest != item.deadline);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(id: u64, deadline: Nanos) -> Queued {
        Queued {
            id: RequestId(id),
            deadline,
            latest: deadline,
            due: deadline,
            demand: 10,
        }
    }

    #[test]
    fn batches_take_what_they_serve_in_time_by_latest() {
        let mut queue = ModelQueue::default();
        // 2 is past a finish at 25 by its deadline but not by its latest: it is served.
        for (id, deadline, latest) in [(1, 10, 10), (2, 20, 40), (3, 30, 30), (4, 40, 40)] {
            queue.push(Queued {
                latest,
                ..q(id, deadline)
            });
        }
        assert_eq!(queue.count_meeting(25), 3);
        let ids: Vec<u64> = queue.take_meeting(25, 2).iter().map(|q| q.id.0).collect();
        assert_eq!(ids, vec![2, 3]);
        assert_eq!(queue.front().map(|q| q.id.0), Some(1));
        assert_eq!(queue.demand(), 20);
        // Without loose requests it is the range after those due before the finish.
        queue.remove(RequestId(1));
        assert_eq!(queue.count_meeting(45), 0);
        assert_eq!(queue.take_meeting(35, 8).len(), 1);
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
