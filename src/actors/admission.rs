//! The admission table: the controller's per-model [`ModelView`]s, shared with the HTTP
//! front end so that it can refuse a request before reading its body, without a round
//! trip to the controller.
//!
//! The controller writes the views of the models each step touched (a request admitted or
//! answered, an action sent or reported); readers take a copy under a read lock. The rule
//! that reads a view is [`crate::scheduler::view::judge`], pure.
//!
//! The front end also counts here, per model, the requests it let through and has not yet
//! handed to the controller (their bodies being read or decoded): the view cannot know
//! them, and under a burst of large bodies they are most of the queue.

use std::collections::HashMap;
use std::sync::{Mutex, RwLock};

use crate::model::ModelId;
use crate::scheduler::view::ModelView;
use crate::scheduler::Policy;
use crate::time::Nanos;

/// Views of every model, indexed by id; `None` until the policy first says something.
#[derive(Debug, Default)]
pub struct AdmissionTable {
    views: RwLock<Vec<Option<ModelView>>>,
    /// Requests of each model past the edge's check and not yet at the controller.
    in_front: Mutex<HashMap<ModelId, u32>>,
}

/// One request counted in [`AdmissionTable::in_front`] until dropped (handed to the
/// controller, or answered at the edge).
#[derive(Debug)]
pub struct InFront<'a> {
    table: &'a AdmissionTable,
    model: ModelId,
}

impl Drop for InFront<'_> {
    fn drop(&mut self) {
        let mut counts = self
            .table
            .in_front
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(n) = counts.get_mut(&self.model) {
            *n = n.saturating_sub(1);
        }
    }
}

impl AdmissionTable {
    /// The latest view of `model`.
    pub fn get(&self, model: ModelId) -> Option<ModelView> {
        let views = self.views.read().unwrap_or_else(|e| e.into_inner());
        views.get(model.0 as usize).copied().flatten()
    }

    /// Requests of `model` the front end let through and has not handed on yet.
    pub fn in_front(&self, model: ModelId) -> u32 {
        let counts = self.in_front.lock().unwrap_or_else(|e| e.into_inner());
        counts.get(&model).copied().unwrap_or(0)
    }

    /// Counts one more request of `model` in front of the controller, until the guard
    /// is dropped.
    pub fn enter(&self, model: ModelId) -> InFront<'_> {
        let mut counts = self.in_front.lock().unwrap_or_else(|e| e.into_inner());
        *counts.entry(model).or_default() += 1;
        InFront { table: self, model }
    }

    /// Asks `policy` for the views of `touched` (emptied) and publishes them.
    pub fn refresh(&self, policy: &dyn Policy, touched: &mut Vec<ModelId>, now: Nanos) {
        if touched.is_empty() {
            return;
        }
        touched.sort_unstable();
        touched.dedup();
        let fresh: Vec<(usize, Option<ModelView>)> = touched
            .drain(..)
            .map(|m| (m.0 as usize, policy.view(m, now)))
            .collect();
        let mut views = self.views.write().unwrap_or_else(|e| e.into_inner());
        for (at, view) in fresh {
            if views.len() <= at {
                views.resize(at + 1, None);
            }
            views[at] = view;
        }
    }
}
