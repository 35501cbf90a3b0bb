//! The executor core: the rules every executor follows, as pure code.
//!
//! One place for them, driven by the executor actor (`crate::actors::Executor`, in real or
//! virtual time) and by the scheduler's testbed (discrete events): two lanes, exec (INFER)
//! and load (LOAD, UNLOAD), each an ordered queue released in `earliest` order and running
//! one action at a time; an action that cannot start by its `latest` is refused without
//! doing anything; weight memory is a count of pages that a LOAD reserves (or is refused
//! for want of) and an UNLOAD frees as it starts; an INFER needs its model's weights loaded;
//! a LOAD of weights already resident (or being loaded) is refused; nothing is ever evicted
//! except by an UNLOAD. No actix, no clock reads, no I/O: the driver says what time it is,
//! runs the work and reports.
//!
//! The driver's loop, per lane: call [`ExecutorCore::next`] until it answers `Idle` or
//! `WaitUntil`; report each `Refuse`; run each `Start` and, when the work ends, call
//! [`ExecutorCore::finish`]. A started LOAD first calls [`ExecutorCore::reserve`] once its
//! page count is known (the actor learns it from the model cache).

use std::collections::BTreeMap;

use super::{Action, ActionError, ActionKind, Execute};
use crate::model::{ActionId, ModelId};
use crate::time::Nanos;

/// The two lanes of a device: one execution and one weight transfer can overlap.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Lane {
    /// INFER actions.
    Exec,
    /// LOAD and UNLOAD actions.
    Load,
}

impl Lane {
    /// Both lanes.
    pub const ALL: [Lane; 2] = [Lane::Exec, Lane::Load];

    /// The lane an action of this kind runs on.
    pub fn of(kind: &ActionKind) -> Lane {
        if kind.is_load_lane() {
            Lane::Load
        } else {
            Lane::Exec
        }
    }

    /// Index into per-lane arrays.
    pub fn index(self) -> usize {
        match self {
            Lane::Exec => 0,
            Lane::Load => 1,
        }
    }
}

/// Something a lane queues: an action, with whatever travels with it.
pub trait Queued {
    /// The action to run.
    fn action(&self) -> &Action;
}

impl Queued for Action {
    fn action(&self) -> &Action {
        self
    }
}

impl Queued for Execute {
    fn action(&self) -> &Action {
        &self.action
    }
}

/// What a lane should do now.
#[derive(Debug, PartialEq)]
pub enum Step<T> {
    /// Nothing: the lane is running an action or has none waiting.
    Idle,
    /// The next action may not start before this time; ask again then.
    WaitUntil(Nanos),
    /// Start this action now; the lane is busy until [`ExecutorCore::finish`]. An UNLOAD
    /// has already freed its pages; a LOAD must [`ExecutorCore::reserve`] its own.
    Start(T),
    /// Do not run this action: report the error. The lane is still free; ask again.
    Refuse(T, ActionError),
}

/// What a probe runs (`ActionKind::Probe`), chosen by [`ExecutorCore::probe_work`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbeWork {
    /// One item of zeros through this resident model.
    Run(ModelId),
    /// LOAD this model into free pages, run one item of zeros through it, UNLOAD it: the
    /// work a device whose LOADs fail, or that holds nothing to run, fails.
    LoadAndRun(ModelId),
    /// Nothing resident and nothing named: an UNLOAD of a model the device never held.
    Nothing,
}

/// Weights of one model on the device.
#[derive(Clone, Copy, Debug)]
struct Weights {
    pages: u32,
    /// The LOAD finished: INFER may use them.
    ready: bool,
}

/// Weights by model, indexed by the dense model id: a lookup on every action, so a vector
/// rather than a tree.
#[derive(Debug, Default)]
struct ByModel(Vec<Option<Weights>>);

impl ByModel {
    fn get(&self, model: &ModelId) -> Option<&Weights> {
        self.0.get(model.0 as usize).and_then(Option::as_ref)
    }

    fn get_mut(&mut self, model: &ModelId) -> Option<&mut Weights> {
        self.0.get_mut(model.0 as usize).and_then(Option::as_mut)
    }

    fn contains_key(&self, model: &ModelId) -> bool {
        self.get(model).is_some()
    }

    fn insert(&mut self, model: ModelId, weights: Weights) {
        let at = model.0 as usize;
        if self.0.len() <= at {
            self.0.resize(at + 1, None);
        }
        self.0[at] = Some(weights);
    }

    fn remove(&mut self, model: &ModelId) -> Option<Weights> {
        self.0.get_mut(model.0 as usize).and_then(Option::take)
    }

    /// In id order.
    fn iter(&self) -> impl Iterator<Item = (ModelId, &Weights)> + '_ {
        self.0
            .iter()
            .enumerate()
            .filter_map(|(i, w)| w.as_ref().map(|w| (ModelId(i as u32), w)))
    }
}

/// The state of one device's executor, without the work itself.
#[derive(Debug)]
pub struct ExecutorCore<T> {
    /// Weight pages of the device.
    pages: u32,
    /// Pages reserved by resident or loading weights.
    used: u32,
    weights: ByModel,
    /// Per lane: waiting actions by (earliest, id).
    waiting: [BTreeMap<(Nanos, ActionId), T>; 2],
    /// Per lane: the action running, if any.
    running: [Option<ActionId>; 2],
}

impl<T: Queued> ExecutorCore<T> {
    /// An idle device with `pages` free weight pages.
    pub fn new(pages: u32) -> Self {
        Self {
            pages,
            used: 0,
            weights: ByModel::default(),
            waiting: [BTreeMap::new(), BTreeMap::new()],
            running: [None, None],
        }
    }

    /// Queues an action on its lane; answers the lane, which the driver should step.
    pub fn submit(&mut self, item: T) -> Lane {
        let action = item.action();
        let lane = Lane::of(&action.kind);
        let key = (action.earliest, action.id);
        self.waiting[lane.index()].insert(key, item);
        lane
    }

    /// What `lane` should do at `now`.
    pub fn next(&mut self, lane: Lane, now: Nanos) -> Step<T> {
        let i = lane.index();
        if self.running[i].is_some() {
            return Step::Idle;
        }
        let Some(head) = self.waiting[i].first_entry() else {
            return Step::Idle;
        };
        let (earliest, _) = *head.key();
        if earliest > now {
            return Step::WaitUntil(earliest);
        }
        let item = head.remove();
        if now > item.action().latest {
            return Step::Refuse(item, ActionError::TooLate);
        }
        match self.admit(item.action()) {
            Ok(()) => {
                self.running[i] = Some(item.action().id);
                Step::Start(item)
            }
            Err(error) => Step::Refuse(item, error),
        }
    }

    /// Checks an action that is due, and frees the pages of an UNLOAD.
    fn admit(&mut self, action: &Action) -> Result<(), ActionError> {
        match action.kind {
            ActionKind::Infer { .. } => match self.weights.get(&action.model) {
                Some(w) if w.ready => Ok(()),
                _ => Err(ActionError::NotResident),
            },
            ActionKind::Load if self.weights.contains_key(&action.model) => {
                Err(ActionError::AlreadyResident)
            }
            // The executor picks the probe's work when it starts (`actors::executor`).
            ActionKind::Load | ActionKind::Probe => Ok(()),
            ActionKind::Unload => {
                if let Some(w) = self.weights.remove(&action.model) {
                    self.used -= w.pages;
                }
                Ok(())
            }
        }
    }

    /// Reserves the pages of a started LOAD of `model`, or refuses it for want of pages
    /// (the driver then reports the error and calls [`finish`](Self::finish)).
    pub fn reserve(&mut self, model: ModelId, pages: u32) -> Result<(), ActionError> {
        if self.weights.contains_key(&model) {
            return Err(ActionError::AlreadyResident);
        }
        let used = self.used.checked_add(pages).filter(|&u| u <= self.pages);
        let Some(used) = used else {
            return Err(ActionError::NoFreePages);
        };
        self.used = used;
        let ready = false;
        self.weights.insert(model, Weights { pages, ready });
        Ok(())
    }

    /// The started `action` ended, well or not: its lane is free again. A LOAD that
    /// succeeded makes its weights usable; one that failed gives its pages back.
    pub fn finish(&mut self, action: &Action, succeeded: bool) {
        let i = Lane::of(&action.kind).index();
        debug_assert_eq!(
            self.running[i],
            Some(action.id),
            "finish of an action not running"
        );
        self.running[i] = None;
        if !matches!(action.kind, ActionKind::Load) {
            return;
        }
        if succeeded {
            if let Some(w) = self.weights.get_mut(&action.model) {
                w.ready = true;
            }
        } else if self.weights.get(&action.model).is_some_and(|w| !w.ready) {
            if let Some(w) = self.weights.remove(&action.model) {
                self.used -= w.pages;
            }
        }
    }

    /// The work of a probe of a device whose last failed action was of `named` (if known):
    /// that model run if it is resident, else loaded and run (the weights may be what
    /// fails), else a run of the resident model of lowest id. The LOAD needs free pages:
    /// the executor falls back to `probe_work(None)` when [`reserve`](Self::reserve)
    /// refuses.
    pub fn probe_work(&self, named: Option<ModelId>) -> ProbeWork {
        match named {
            Some(model) if self.is_ready(model) => ProbeWork::Run(model),
            Some(model) => ProbeWork::LoadAndRun(model),
            None => self
                .resident()
                .min()
                .map_or(ProbeWork::Nothing, ProbeWork::Run),
        }
    }

    fn is_ready(&self, model: ModelId) -> bool {
        self.weights.get(&model).is_some_and(|w| w.ready)
    }

    /// Gives back the pages of `model`'s weights, loaded or not: a probe's own LOAD, whose
    /// weights it unloads again before it reports.
    pub fn release(&mut self, model: ModelId) {
        if let Some(w) = self.weights.remove(&model) {
            self.used -= w.pages;
        }
    }

    /// Weight pages of the device.
    pub fn pages(&self) -> u32 {
        self.pages
    }

    /// Pages held by resident or loading weights.
    pub fn pages_used(&self) -> u32 {
        self.used
    }

    /// Models whose weights are loaded and ready, in id order.
    pub fn resident(&self) -> impl Iterator<Item = ModelId> + '_ {
        self.weights.iter().filter(|(_, w)| w.ready).map(|(m, _)| m)
    }

    /// Actions waiting on `lane`.
    pub fn waiting(&self, lane: Lane) -> usize {
        self.waiting[lane.index()].len()
    }

    /// Whether `lane` is running an action.
    pub fn busy(&self, lane: Lane) -> bool {
        self.running[lane.index()].is_some()
    }
}

#[cfg(test)]
#[path = "core_tests.rs"]
mod tests;
