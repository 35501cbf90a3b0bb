//! The admission table: the controller's per-model [`ModelView`]s, shared with the HTTP
//! front end so that it can refuse a request before reading its body, without a round
//! trip to the controller.
//!
//! The controller writes the views of the models each step touched (a request admitted or
//! answered, an action sent or reported); readers take a copy under a read lock. The rule
//! that reads a view is [`crate::scheduler::view::judge`], pure.

use std::sync::{Mutex, RwLock};

use crate::model::ModelId;
use crate::scheduler::view::ModelView;
use crate::scheduler::Policy;
use crate::time::Nanos;

/// Views of every model, indexed by id; `None` until the policy first says something.
#[derive(Debug, Default)]
pub struct AdmissionTable {
    views: RwLock<Vec<Option<ModelView>>>,
    /// The fresh views of one refresh, asked for before the write lock is taken (readers
    /// never wait on the policy); kept between refreshes, since a new list each step was
    /// an allocation per request. Only the controller refreshes: never contended.
    fresh: Mutex<Vec<(usize, Option<ModelView>)>>,
}

impl AdmissionTable {
    /// The latest view of `model`.
    pub fn get(&self, model: ModelId) -> Option<ModelView> {
        let views = self.views.read().unwrap_or_else(|e| e.into_inner());
        views.get(model.0 as usize).copied().flatten()
    }

    /// Asks `policy` for the views of `touched` (emptied) and publishes them.
    pub fn refresh(&self, policy: &dyn Policy, touched: &mut Vec<ModelId>, now: Nanos) {
        if touched.is_empty() {
            return;
        }
        touched.sort_unstable();
        touched.dedup();
        let mut fresh = self.fresh.lock().unwrap_or_else(|e| e.into_inner());
        fresh.clear();
        fresh.extend(
            touched
                .drain(..)
                .map(|m| (m.0 as usize, policy.view(m, now))),
        );
        let mut views = self.views.write().unwrap_or_else(|e| e.into_inner());
        for (at, view) in fresh.drain(..) {
            if views.len() <= at {
                views.resize(at + 1, None);
            }
            views[at] = view;
        }
    }
}
