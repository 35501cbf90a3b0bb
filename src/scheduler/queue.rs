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
    /// Items it carries (at least 1): they run in one batch, never split.
    pub items: u32,
    /// It runs in a batch of its own: it was in a batch that the model failed to run on
    /// its inputs, and alone it fails, or is served, without taking others along.
    pub alone: bool,
    /// When admission projected it to finish (its margins included), or 0 without a
    /// projection: its latest finish less this is the slack it was admitted with, which
    /// admission learns from with whether it finished in time (`clockwork::hindsight`).
    pub projected: Nanos,
}

/// Waiting requests of one model, earliest deadline first.
#[derive(Debug, Default)]
pub struct ModelQueue {
    queue: VecDeque<Queued>,
    /// Sum of the items' demand.
    demand: u64,
    /// Items whose `latest` is past their `deadline`: while there are none (a model
    /// serving no pipeline), `latest` follows deadline order and the searches below are
    /// binary ones.
    loose: usize,
    /// Sum of the requests' items: batches are sized in items.
    items: usize,
    /// Requests of more than one item: while there are none, a request is an item and
    /// the searches stay binary ones.
    multi: usize,
    /// Requests that run alone: while there are none, a batch is a range of the queue.
    alone: usize,
}

impl ModelQueue {
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    pub fn demand(&self) -> u64 {
        self.demand
    }

    /// Items of every queued request.
    pub fn items(&self) -> usize {
        self.items
    }

    pub fn front(&self) -> Option<&Queued> {
        self.queue.front()
    }

    pub fn back(&self) -> Option<&Queued> {
        self.queue.back()
    }

    /// Inserts in deadline order; equal deadlines keep arrival order. Requests mostly
    /// arrive in deadline order, so the search from the back is usually one step.
    pub fn push(&mut self, item: Queued) {
        let at = self
            .queue
            .iter()
            .rposition(|q| q.deadline <= item.deadline)
            .map_or(0, |i| i + 1);
        self.demand += item.demand;
        self.loose += usize::from(item.latest != item.deadline);
        self.items += item.items as usize;
        self.multi += usize::from(item.items != 1);
        self.alone += usize::from(item.alone);
        self.queue.insert(at, item);
    }

    /// Removes the request `id`, if queued.
    pub fn remove(&mut self, id: RequestId) -> Option<Queued> {
        let at = self.queue.iter().position(|q| q.id == id)?;
        let item = self.queue.remove(at)?;
        self.took(&item);
        Some(item)
    }

    pub fn pop_front(&mut self) -> Option<Queued> {
        let item = self.queue.pop_front()?;
        self.took(&item);
        Some(item)
    }

    /// The requests from position `from` on, in deadline order.
    pub fn iter_from(&self, from: usize) -> impl Iterator<Item = &Queued> + Clone + '_ {
        self.queue.range(from.min(self.queue.len())..)
    }

    /// Number of requests whose deadline is before `time` (they are at the front).
    pub fn count_before(&self, time: Nanos) -> usize {
        self.queue.partition_point(|q| q.deadline < time)
    }

    /// Removes `n` requests after the `skip` most urgent ones.
    fn take_range(&mut self, skip: usize, n: usize) -> Vec<Queued> {
        let end = (skip + n).min(self.queue.len());
        let taken: Vec<Queued> = self.queue.drain(skip.min(end)..end).collect();
        taken.iter().for_each(|q| self.took(q));
        taken
    }

    /// Items of the requests whose deadline is before `time` (they are at the front).
    pub fn items_before(&self, time: Nanos) -> usize {
        let n = self.count_before(time);
        if self.multi == 0 {
            return n;
        }
        self.queue.range(..n).map(|q| q.items as usize).sum()
    }

    /// Items that a batch finishing at `finish` would still serve in time (`latest` not
    /// before it).
    pub fn items_meeting(&self, finish: Nanos) -> usize {
        if self.loose == 0 {
            return self.items - self.items_before(finish);
        }
        let meeting = self.queue.iter().filter(|q| q.latest >= finish);
        meeting.map(|q| q.items as usize).sum()
    }

    /// Items a batch of at most `size` items finishing at `finish` (`None`: whenever)
    /// would take: what [`Self::take_fitting`] removes, without removing it.
    pub fn fill(&self, finish: Option<Nanos>, size: usize) -> usize {
        if self.multi == 0 && self.alone == 0 {
            let meeting = finish.map_or(self.items, |f| self.items_meeting(f));
            return meeting.min(size);
        }
        self.fitting(finish, size)
            .map(|(_, q)| q.items as usize)
            .sum()
    }

    /// Removes the most urgent requests that a batch of at most `size` items finishing at
    /// `finish` (`None`: whenever) serves in time, whole: a request whose items would
    /// overflow the batch is passed over for the next one that fits, and one that runs
    /// `alone` is a batch only if it comes first. The others stay queued (for another
    /// batch, or until they expire).
    pub fn take_fitting(&mut self, finish: Option<Nanos>, size: usize) -> Vec<Queued> {
        if self.multi == 0 && self.loose == 0 && self.alone == 0 {
            let skip = finish.map_or(0, |f| self.count_before(f));
            return self.take_range(skip, size);
        }
        let at: Vec<usize> = self.fitting(finish, size).map(|(i, _)| i).collect();
        // Removed from the back so that the positions stay valid.
        let mut taken: Vec<Queued> = at
            .iter()
            .rev()
            .filter_map(|&i| self.queue.remove(i))
            .collect();
        taken.reverse();
        taken.iter().for_each(|q| self.took(q));
        taken
    }

    /// Positions and requests of a first-fit batch of at most `size` items, in urgency
    /// order, of the requests that meet `finish`: a request that runs alone is the whole
    /// batch if it comes first, else passed over.
    fn fitting(
        &self,
        finish: Option<Nanos>,
        size: usize,
    ) -> impl Iterator<Item = (usize, &Queued)> + '_ {
        let mut room = size;
        self.queue
            .iter()
            .enumerate()
            .filter(move |(_, q)| finish.is_none_or(|f| q.latest >= f))
            .filter(move |(_, q)| {
                let fits = q.items as usize <= room && (!q.alone || room == size);
                if fits {
                    room = if q.alone { 0 } else { room - q.items as usize };
                }
                fits
            })
    }

    /// The request that expires first, where a request whose run alone takes
    /// `alone(items)` expires `alone` before its `latest`: the front while every request
    /// is one item and `latest` follows deadline order (a model serving no pipeline);
    /// otherwise a request behind the front may expire first (a pipeline sub-request's
    /// `latest` follows its root's deadline, not its stage's), so all are looked at.
    pub fn expiring_first(&self, alone: impl Fn(u32) -> Nanos) -> Option<&Queued> {
        if self.loose == 0 && self.multi == 0 {
            return self.front();
        }
        self.queue
            .iter()
            .min_by_key(|q| q.latest.saturating_sub(alone(q.items)))
    }

    /// The requests a batch finishing at `finish` leaves behind (their latest finish is
    /// before it) teach admission nothing when they expire (`Queued::projected` 0).
    pub fn left_behind(&mut self, finish: Nanos) {
        for q in self.queue.iter_mut().take_while(|q| q.deadline < finish) {
            if q.latest < finish {
                q.projected = 0;
            }
        }
    }

    /// Removes every request that `expired` says can no longer be served, in deadline
    /// order; the rest keep theirs.
    pub fn take_expired(&mut self, expired: impl Fn(&Queued) -> bool) -> Vec<Queued> {
        if self.loose == 0 && self.multi == 0 {
            // `latest` follows deadline order: the expired ones are at the front.
            let n = self.queue.iter().take_while(|q| expired(q)).count();
            return self.take_range(0, n);
        }
        let (gone, kept): (VecDeque<Queued>, VecDeque<Queued>) = std::mem::take(&mut self.queue)
            .into_iter()
            .partition(expired);
        self.queue = kept;
        gone.iter().for_each(|q| self.took(q));
        gone.into()
    }

    fn took(&mut self, item: &Queued) {
        self.demand -= item.demand;
        self.loose -= usize::from(item.latest != item.deadline);
        self.items -= item.items as usize;
        self.multi -= usize::from(item.items != 1);
        self.alone -= usize::from(item.alone);
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
            items: 1,
            alone: false,
            projected: 0,
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
        assert_eq!(queue.items_meeting(25), 3);
        let ids: Vec<u64> = queue
            .take_fitting(Some(25), 2)
            .iter()
            .map(|q| q.id.0)
            .collect();
        assert_eq!(ids, vec![2, 3]);
        assert_eq!(queue.front().map(|q| q.id.0), Some(1));
        assert_eq!(queue.demand(), 20);
        // Without loose requests it is the range after those due before the finish.
        queue.remove(RequestId(1));
        assert_eq!(queue.items_meeting(45), 0);
        assert_eq!(queue.take_fitting(Some(35), 8).len(), 1);
    }

    #[test]
    fn a_loose_request_behind_the_front_expires_first() {
        let mut queue = ModelQueue::default();
        // 2 is behind 1 by deadline but worth serving only until 25, 1 until 50.
        for (id, deadline, latest) in [(1, 10, 50), (2, 20, 25), (3, 30, 30)] {
            queue.push(Queued {
                latest,
                ..q(id, deadline)
            });
        }
        let alone = |_| 5;
        assert_eq!(queue.expiring_first(alone).map(|q| q.id.0), Some(2));
        let gone: Vec<u64> = queue
            .take_expired(|q| 21 + alone(q.items) > q.latest)
            .iter()
            .map(|q| q.id.0)
            .collect();
        assert_eq!(gone, vec![2]);
        let left: Vec<u64> = queue.take_range(0, 8).iter().map(|q| q.id.0).collect();
        assert_eq!((left, queue.demand()), (vec![1, 3], 0));
        // Without loose requests the front expires first, and the expired are in front.
        for id in 4..7 {
            queue.push(q(id, id * 10));
        }
        assert_eq!(queue.expiring_first(alone).map(|q| q.id.0), Some(4));
        assert_eq!(queue.take_expired(|q| 55 > q.deadline).len(), 2);
        assert_eq!(queue.front().map(|q| q.id.0), Some(6));
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

    #[test]
    fn batches_take_whole_requests_that_fit_in_items() {
        let mut queue = ModelQueue::default();
        // (id, deadline, items): 2 does not fit beside 1 in a batch of 4, 3 does.
        for (id, deadline, items) in [(1, 10, 3), (2, 20, 2), (3, 30, 1), (4, 40, 4)] {
            queue.push(Queued {
                items,
                ..q(id, deadline)
            });
        }
        assert_eq!(queue.items(), 10);
        assert_eq!(queue.items_before(25), 5);
        assert_eq!(queue.items_meeting(15), 7);
        assert_eq!(queue.fill(None, 4), 4);
        assert_eq!(queue.fill(Some(15), 4), 3, "2 and 3 fit, 4 would overflow");
        let ids: Vec<u64> = queue.take_fitting(None, 4).iter().map(|q| q.id.0).collect();
        assert_eq!(ids, vec![1, 3]);
        assert_eq!(queue.items(), 6);
        let ids: Vec<u64> = queue.take_fitting(None, 3).iter().map(|q| q.id.0).collect();
        assert_eq!(ids, vec![2], "4 items never split over batches of 3");
        assert_eq!(queue.take_fitting(None, 4).len(), 1);
        assert_eq!((queue.len(), queue.items(), queue.demand()), (0, 0, 0));
    }

    #[test]
    fn a_request_that_runs_alone_is_a_batch_only_when_first() {
        let mut queue = ModelQueue::default();
        for (id, deadline, alone) in [(1, 10, false), (2, 20, true), (3, 30, false)] {
            queue.push(Queued {
                alone,
                ..q(id, deadline)
            });
        }
        // 2 is passed over by the batch that 1 starts; then it is a batch of its own.
        assert_eq!(queue.fill(None, 8), 2);
        let ids: Vec<u64> = queue.take_fitting(None, 8).iter().map(|q| q.id.0).collect();
        assert_eq!(ids, vec![1, 3]);
        queue.push(q(4, 40));
        let ids: Vec<u64> = queue.take_fitting(None, 8).iter().map(|q| q.id.0).collect();
        assert_eq!(ids, vec![2]);
        assert_eq!(queue.take_fitting(None, 8).len(), 1);
        assert_eq!((queue.len(), queue.items(), queue.demand()), (0, 0, 0));
    }
}
