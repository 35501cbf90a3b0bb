//! The reactive baseline's loading: a model that missed is loaded on the first device
//! with an idle load lane, evicting the least recently used idle models to make room.

use super::{m_pages, ReactivePolicy, Work};
use crate::model::{DeviceId, ModelId};
use crate::scheduler::{ActionKind, Plan};
use crate::time::Nanos;

impl ReactivePolicy {
    /// Loads the oldest missed model on a device with an idle load lane, evicting the
    /// least recently used models to make room.
    pub(super) fn load_missed(&mut self, device: DeviceId, now: Nanos, plan: &mut Plan) {
        while let Some(&model) = self.misses.front() {
            let m = &self.models[model.0 as usize];
            let held = self
                .devices
                .iter()
                .any(|d| d.residents.contains_key(&model));
            if m.queue.is_empty() || held || m.loading {
                self.misses.pop_front();
                continue;
            }
            if !m.info.allowed_on(device) {
                // Another device takes it (every model may be held by some device).
                return;
            }
            let Some(victims) = self.lru_victims(device, m.info.pages) else {
                return;
            };
            self.misses.pop_front();
            self.evict_and_load(device, model, victims, now, plan);
            return;
        }
    }

    fn lru_victims(&self, device: DeviceId, needed: u32) -> Option<Vec<ModelId>> {
        self.idle_victims(device.0 as usize, needed, |_| true)
    }

    /// Idle residents of device `d` that `evictable` allows, least recently used first,
    /// enough to free `need` pages with the pages already free; `None` if they are not
    /// enough. The reactive baselines' one eviction order (the triton-like one passes its
    /// replica floors).
    pub(super) fn idle_victims(
        &self,
        d: usize,
        need: u32,
        evictable: impl Fn(ModelId) -> bool,
    ) -> Option<Vec<ModelId>> {
        let dev = &self.devices[d];
        let mut idle: Vec<(Nanos, ModelId)> = dev
            .residents
            .iter()
            .filter(|(&m, r)| r.0 && r.2 == 0 && evictable(m))
            .map(|(&m, r)| (r.1, m))
            .collect();
        idle.sort_unstable();
        let mut free = dev.pages - dev.used;
        let mut victims = Vec::new();
        for (_, m) in idle {
            if free >= need {
                break;
            }
            free += m_pages(&self.models, m);
            victims.push(m);
        }
        (free >= need).then_some(victims)
    }

    /// Unloads `victims` from `device` (a victim with waiting requests misses again) and
    /// loads `model` there in their place.
    pub(super) fn evict_and_load(
        &mut self,
        device: DeviceId,
        model: ModelId,
        victims: Vec<ModelId>,
        now: Nanos,
        plan: &mut Plan,
    ) {
        for victim in victims {
            let d = &mut self.devices[device.0 as usize];
            if d.residents.remove(&victim).is_some() {
                d.used -= m_pages(&self.models, victim);
            }
            if !self.models[victim.0 as usize].queue.is_empty() {
                // Its waiting requests now miss too.
                self.misses.push_back(victim);
            }
            self.send(plan, device, victim, ActionKind::Unload, Work::Unload, now);
        }
        let pages = self.models[model.0 as usize].info.pages;
        let d = &mut self.devices[device.0 as usize];
        d.used += pages;
        d.residents.insert(model, (false, now, 0));
        d.load_busy = true;
        self.models[model.0 as usize].loading = true;
        self.send(plan, device, model, ActionKind::Load, Work::Load, now);
    }
}

impl ReactivePolicy {
    /// Ready replicas per model (this baseline loads a model on its first request only).
    pub(super) fn ready_replicas(&self) -> Vec<u32> {
        let mut ready = vec![0; self.models.len()];
        for d in &self.devices {
            for (model, r) in d.residents.iter() {
                if r.0 {
                    ready[model.0 as usize] += 1;
                }
            }
        }
        ready
    }
}
