//! The one model registry: the only place that gives a model its id.
//!
//! Registration is the same at start and while serving (a repository load): the
//! [`Catalog`] (pure: names, ids, eligibility, the model table) admits a candidate or says
//! why not, and [`Registry::register`] then tells, in this order, the policy (which must
//! agree on the id), the model cache (before any LOAD of the model can be dispatched) and
//! the [`ModelTable`], whose watchers (the API's model table, its metrics) hear of the
//! model before any reader can find it. A registered thing has a name, an id and a spec;
//! pipelines will register the same way.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use super::eligibility::{
    device_allows, eligible_devices, eligible_devices_open, DeviceFacts, ModelFacts,
};
use super::messages::{RegisterArtifact, RegisterError};
use crate::config::BackendKind;
use crate::gpu::Prepared;
use crate::model::{DeviceId, KindProfile, ModelId, ModelSpec};
use crate::scheduler::{DeviceInfo, ModelInfo, Policy};

/// Something asking to be registered.
#[derive(Clone, Debug)]
pub struct Candidate {
    pub spec: ModelSpec,
    /// The graph (ONNX bytes), for devices that compute real outputs.
    pub bytes: Option<Arc<[u8]>>,
    /// What the backends built from the graph, shared by every device that loads it.
    pub prepared: Prepared,
    /// Profiles measured per device kind; kinds without one start from `spec.profile`.
    pub profiles: Vec<KindProfile>,
    /// Backends its configuration allows; `None`: the default placement.
    pub backends: Option<Vec<BackendKind>>,
}

impl Candidate {
    /// A model described by its spec alone (built-in profiles, tests): nothing prepared,
    /// one profile for every kind.
    pub fn spec_only(spec: ModelSpec) -> Self {
        Self {
            spec,
            bytes: None,
            prepared: Prepared::default(),
            profiles: Vec::new(),
            backends: None,
        }
    }
}

/// A registered model, as every part that needs it sees it.
#[derive(Debug)]
pub struct Registered {
    pub id: ModelId,
    pub spec: ModelSpec,
    /// Its graph, kept for the model cache.
    pub bytes: Option<Arc<[u8]>>,
    /// What the backends built from the graph, kept for the model cache.
    pub prepared: Prepared,
    /// Profiles measured per device kind, for the policy's estimates.
    pub profiles: Vec<KindProfile>,
    /// Pages its weights take on a device.
    pub pages: u32,
    /// Devices that may hold it; `None`: every device.
    pub devices: Option<Vec<DeviceId>>,
    /// Backends its configuration allows (`None`: the default placement), kept to judge
    /// devices that join later.
    pub backends: Option<Vec<BackendKind>>,
}

impl Registered {
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// What the policy is told of it.
    pub fn policy_info(&self) -> ModelInfo {
        ModelInfo {
            pages: self.pages,
            profile: self.spec.profile.clone(),
            by_kind: self.profiles.clone(),
            devices: self.devices.clone(),
        }
    }
}

/// The pure part: names, ids, eligibility and the registered models.
pub struct Catalog {
    devices: Vec<DeviceFacts>,
    page_bytes: u64,
    models: Vec<Arc<Registered>>,
    by_name: HashMap<String, ModelId>,
    /// Devices may join later (remote workers): a model no device holds yet waits for one
    /// instead of being refused.
    open: bool,
}

impl Catalog {
    /// An empty catalog for `devices`, whose memory comes in pages of `page_bytes`.
    pub fn new(devices: Vec<DeviceFacts>, page_bytes: u64) -> Self {
        Self {
            devices,
            page_bytes,
            models: Vec::new(),
            by_name: HashMap::new(),
            open: false,
        }
    }

    /// The same catalog, open to devices that join later (a controller with
    /// `[cluster] listen`).
    pub fn open_to_workers(mut self) -> Self {
        self.open = true;
        self
    }

    /// A device joins (a remote worker's): its facts are kept for later registrations,
    /// and the answer says, per registered model, whether the device may hold it.
    pub fn add_device(&mut self, device: DeviceFacts) -> Vec<(ModelId, bool)> {
        self.devices.push(device);
        let page_bytes = self.page_bytes;
        self.models
            .iter()
            .map(|m| {
                let facts = ModelFacts::new(
                    &m.spec,
                    page_bytes,
                    m.bytes.is_some(),
                    m.backends.as_deref(),
                );
                (m.id, device_allows(facts, &device))
            })
            .collect()
    }

    /// The model `candidate` would become (with the next id), or why it may not.
    pub fn admit(&self, candidate: Candidate) -> Result<Registered, RegisterError> {
        let spec = &candidate.spec;
        if self.by_name.contains_key(&spec.name) {
            return Err(RegisterError::Duplicate(spec.name.clone()));
        }
        let facts = ModelFacts::new(
            spec,
            self.page_bytes,
            candidate.bytes.is_some(),
            candidate.backends.as_deref(),
        );
        let devices = match eligible_devices(facts, &self.devices) {
            Err(_) if self.open => Some(eligible_devices_open(facts, &self.devices)),
            other => other?,
        };
        Ok(Registered {
            id: ModelId(self.models.len() as u32),
            pages: facts.pages,
            devices,
            spec: candidate.spec,
            bytes: candidate.bytes,
            prepared: candidate.prepared,
            profiles: candidate.profiles,
            backends: candidate.backends,
        })
    }

    /// Records an admitted model; it must be the last one [`Catalog::admit`] answered.
    fn commit(&mut self, model: Registered) -> Arc<Registered> {
        debug_assert_eq!(model.id.0 as usize, self.models.len());
        let model = Arc::new(model);
        self.by_name.insert(model.spec.name.clone(), model.id);
        self.models.push(Arc::clone(&model));
        model
    }

    /// The id of the model named `name`.
    pub fn id(&self, name: &str) -> Option<ModelId> {
        self.by_name.get(name).copied()
    }

    /// The model of `id`.
    pub fn get(&self, id: ModelId) -> Option<&Arc<Registered>> {
        self.models.get(id.0 as usize)
    }

    /// Every registered model, in id order.
    pub fn models(&self) -> &[Arc<Registered>] {
        &self.models
    }
}

/// Called with each model registered, in id order.
type Watcher = Box<dyn Fn(&Registered) + Send + Sync>;

#[derive(Default)]
struct Shared {
    models: Vec<Arc<Registered>>,
    watchers: Vec<Watcher>,
}

/// The registered models as other threads see them (the API): read-mostly, shared, and
/// watchable. Cheap to clone.
#[derive(Clone, Default)]
pub struct ModelTable(Arc<RwLock<Shared>>);

impl ModelTable {
    /// Every registered model, in id order.
    pub fn models(&self) -> Vec<Arc<Registered>> {
        self.read().models.clone()
    }

    /// Calls `watcher` for every model registered so far, then for each one registered
    /// later, in id order and none twice. It runs under the table's lock: it must not
    /// use the table.
    pub fn watch(&self, watcher: impl Fn(&Registered) + Send + Sync + 'static) {
        let mut shared = self.0.write().unwrap_or_else(|e| e.into_inner());
        for model in &shared.models {
            watcher(model);
        }
        shared.watchers.push(Box::new(watcher));
    }

    fn publish(&self, model: Arc<Registered>) {
        let mut shared = self.0.write().unwrap_or_else(|e| e.into_inner());
        // Watchers first, under the lock: whoever finds the model finds it everywhere.
        for watcher in &shared.watchers {
            watcher(&model);
        }
        shared.models.push(model);
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Shared> {
        self.0.read().unwrap_or_else(|e| e.into_inner())
    }
}

/// Hands an artifact to the model cache (an actor's mailbox; a closure in tests).
pub type CacheSink = Box<dyn Fn(RegisterArtifact) + Send>;

/// The catalog with the parts it tells: the model cache and the shared table.
pub struct Registry {
    catalog: Catalog,
    cache: CacheSink,
    table: ModelTable,
}

impl Registry {
    pub fn new(catalog: Catalog, cache: CacheSink, table: ModelTable) -> Self {
        Self {
            catalog,
            cache,
            table,
        }
    }

    /// Registers `candidate`: gives it the next id and tells the policy, the model cache
    /// and the table, or refuses it before anything is changed.
    pub fn register(
        &mut self,
        policy: &mut dyn Policy,
        candidate: Candidate,
    ) -> Result<Arc<Registered>, RegisterError> {
        let model = self.catalog.admit(candidate)?;
        let policy_id = policy.add_model(model.policy_info());
        if policy_id != model.id {
            return Err(RegisterError::OutOfStep {
                name: model.spec.name,
                registry: model.id.0,
                policy: policy_id.0,
            });
        }
        let model = self.catalog.commit(model);
        // The cache hears of it before any LOAD of it can be dispatched: the same sender
        // sends LOADs later, and an executor only fetches after a LOAD.
        (self.cache)(RegisterArtifact {
            id: model.id,
            spec: model.spec.clone(),
            bytes: model.bytes.clone(),
            prepared: model.prepared.clone(),
        });
        self.table.publish(Arc::clone(&model));
        Ok(model)
    }

    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// A device joins while serving (a remote worker's): the policy learns it and which
    /// registered models it may hold. Answers its id.
    pub fn join(
        &mut self,
        policy: &mut dyn Policy,
        info: DeviceInfo,
        facts: DeviceFacts,
    ) -> DeviceId {
        let device = policy.add_device(info);
        for (model, allowed) in self.catalog.add_device(facts) {
            policy.set_allowed(model, device, allowed);
        }
        device
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::profiles;

    const SIM: DeviceFacts = DeviceFacts {
        backend: Some(BackendKind::Sim),
        pages: 100,
        emulated: true,
        needs_graph: false,
    };

    fn candidate(name: &str) -> Candidate {
        Candidate::spec_only(profiles::model("resnet50", name, 1).expect("built-in profile"))
    }

    #[test]
    fn ids_are_dense_and_names_unique() {
        let mut catalog = Catalog::new(vec![SIM], 16 << 20);
        let a = catalog.admit(candidate("a")).unwrap();
        assert_eq!(a.id, ModelId(0));
        catalog.commit(a);
        let b = catalog.admit(candidate("b")).unwrap();
        assert_eq!(b.id, ModelId(1));
        catalog.commit(b);
        assert_eq!(
            catalog.admit(candidate("a")).unwrap_err(),
            RegisterError::Duplicate("a".into())
        );
        assert_eq!(catalog.id("b"), Some(ModelId(1)));
        assert_eq!(catalog.get(ModelId(0)).map(|m| m.name()), Some("a"));
    }

    #[test]
    fn ineligible_models_are_refused_and_take_no_id() {
        let mut catalog = Catalog::new(vec![SIM], 16 << 20);
        let mut graph = candidate("real");
        graph.bytes = Some(Arc::from(&b"onnx"[..]));
        let err = catalog.admit(graph).unwrap_err();
        assert!(matches!(err, RegisterError::Ineligible(_)), "{err}");
        let next = catalog.admit(candidate("a")).unwrap();
        assert_eq!(next.id, ModelId(0));
        catalog.commit(next);
        assert_eq!(catalog.models().len(), 1);
    }

    #[test]
    fn watchers_see_past_and_future_models_once_in_order() {
        let table = ModelTable::default();
        let catalog = Catalog::new(vec![SIM], 16 << 20);
        let first = catalog.admit(candidate("a")).unwrap();
        table.publish(Arc::new(first));
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        table.watch(move |m| log.lock().unwrap().push(m.name().to_owned()));
        let mut catalog = Catalog::new(vec![SIM], 16 << 20);
        catalog.commit(catalog.admit(candidate("a")).unwrap());
        table.publish(Arc::new(catalog.admit(candidate("b")).unwrap()));
        assert_eq!(*seen.lock().unwrap(), vec!["a", "b"]);
        assert_eq!(table.models().len(), 2);
    }

    fn registry(table: &ModelTable, cached: &Arc<std::sync::Mutex<Vec<ModelId>>>) -> Registry {
        let cached = Arc::clone(cached);
        let sink: CacheSink = Box::new(move |a| cached.lock().unwrap().push(a.id));
        Registry::new(Catalog::new(vec![SIM], 16 << 20), sink, table.clone())
    }

    #[test]
    fn registration_tells_policy_cache_and_table_the_same_id() {
        let table = ModelTable::default();
        let cached = Arc::default();
        let mut registry = registry(&table, &cached);
        let mut policy = crate::scheduler::build(&Default::default());
        for name in ["a", "b"] {
            registry.register(policy.as_mut(), candidate(name)).unwrap();
        }
        assert_eq!(*cached.lock().unwrap(), vec![ModelId(0), ModelId(1)]);
        let ids: Vec<ModelId> = table.models().iter().map(|m| m.id).collect();
        assert_eq!(ids, vec![ModelId(0), ModelId(1)]);
        let err = registry
            .register(policy.as_mut(), candidate("a"))
            .unwrap_err();
        assert_eq!(err, RegisterError::Duplicate("a".into()));
        assert_eq!(cached.lock().unwrap().len(), 2, "a refusal tells nobody");
    }

    #[test]
    fn a_policy_out_of_step_is_an_error_not_a_mixup() {
        let table = ModelTable::default();
        let cached = Arc::default();
        let mut registry = registry(&table, &cached);
        let mut policy = crate::scheduler::build(&Default::default());
        let stray = candidate("stray");
        policy.add_model(ModelInfo {
            pages: 1,
            profile: stray.spec.profile,
            by_kind: Vec::new(),
            devices: None,
        });
        let err = registry
            .register(policy.as_mut(), candidate("a"))
            .unwrap_err();
        assert!(
            matches!(
                err,
                RegisterError::OutOfStep {
                    policy: 1,
                    registry: 0,
                    ..
                }
            ),
            "{err}"
        );
        assert!(cached.lock().unwrap().is_empty());
        assert!(table.models().is_empty());
    }
}
