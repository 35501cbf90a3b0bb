//! Which devices may hold a model, decided once when it is registered.
//!
//! Devices are judged by what they declare they can do (`BackendInfo`: whether they
//! compute real outputs, whether they need the graph), never by their backend's name. A
//! model may name the backends that serve it. If it names none, a model with a real graph
//! goes to the devices that compute real outputs, never to an emulator that would answer
//! made-up outputs; it is emulated only if its configuration lists an emulating backend
//! (`sim`). A model with only a profile (no graph) goes to devices that need no graph.
//! Its weights must fit the device's memory. A model no device may hold is refused with
//! the reason, before anything is started or changed.

use crate::config::BackendKind;
use crate::model::DeviceId;

/// What registration needs to know of a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceFacts {
    /// Its configured backend, the name a model's `backends` list matches; `None` for a
    /// backend added in code (custom backends), which no list names.
    pub backend: Option<BackendKind>,
    /// Its weight memory, which a model's pages must fit.
    pub pages: u32,
    /// It answers made-up outputs (`BackendInfo::emulated`): real graphs go elsewhere
    /// unless their configuration asks for it.
    pub emulated: bool,
    /// It builds models from their graph (`BackendInfo::needs_graph`): profile-only models
    /// cannot run on it.
    pub needs_graph: bool,
}

impl DeviceFacts {
    /// The facts of a device that declares `info`, configured as `backend`.
    pub fn new(backend: Option<BackendKind>, info: &crate::gpu::BackendInfo) -> Self {
        Self {
            backend,
            pages: info.pages,
            emulated: info.emulated,
            needs_graph: info.needs_graph,
        }
    }
}

/// What registration needs to know of a model.
#[derive(Clone, Copy, Debug)]
pub struct ModelFacts<'a> {
    pub name: &'a str,
    /// Pages its weights take.
    pub pages: u32,
    /// It has a real graph (ONNX bytes), not only a profile.
    pub has_graph: bool,
    /// Backends allowed to serve it; `None`: any.
    pub backends: Option<&'a [BackendKind]>,
}

impl<'a> ModelFacts<'a> {
    /// The facts of `spec` with pages of `page_bytes`.
    pub fn new(
        spec: &'a crate::model::ModelSpec,
        page_bytes: u64,
        has_graph: bool,
        backends: Option<&'a [BackendKind]>,
    ) -> Self {
        Self {
            name: &spec.name,
            pages: spec.profile.pages(page_bytes),
            has_graph,
            backends,
        }
    }
}

/// Why no device may hold a model.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IneligibleModel {
    #[error("model '{model}': no configured device can serve it ({why})")]
    NoDevice { model: String, why: String },
    #[error("model '{name}' needs {pages} pages, more than any device that may serve it has ({largest})")]
    TooLarge {
        name: String,
        pages: u32,
        largest: u32,
    },
}

/// The devices that may hold `model`: `None` if every device may, else their ids.
pub fn eligible_devices(
    model: ModelFacts<'_>,
    devices: &[DeviceFacts],
) -> Result<Option<Vec<DeviceId>>, IneligibleModel> {
    let allowed: Vec<DeviceId> = devices
        .iter()
        .enumerate()
        .filter(|(_, d)| backend_allows(model, d))
        .map(|(i, _)| DeviceId(i as u32))
        .collect();
    if allowed.is_empty() {
        return Err(IneligibleModel::NoDevice {
            model: model.name.to_owned(),
            why: why_none(model),
        });
    }
    let largest = allowed
        .iter()
        .map(|d| devices[d.0 as usize].pages)
        .max()
        .unwrap_or(0);
    if model.pages > largest {
        return Err(IneligibleModel::TooLarge {
            name: model.name.to_owned(),
            pages: model.pages,
            largest,
        });
    }
    let fitting: Vec<DeviceId> = allowed
        .into_iter()
        .filter(|d| devices[d.0 as usize].pages >= model.pages)
        .collect();
    Ok((fitting.len() < devices.len()).then_some(fitting))
}

/// Whether one device may hold `model` (its backend allows it and the weights fit): the
/// rule for a device that joins after the model was registered (a remote worker's).
pub fn device_allows(model: ModelFacts<'_>, device: &DeviceFacts) -> bool {
    backend_allows(model, device) && device.pages >= model.pages
}

/// The devices that may hold `model` now, when more may join later (a controller that
/// accepts remote workers): never an error, the model waits for a device that fits.
pub fn eligible_devices_open(model: ModelFacts<'_>, devices: &[DeviceFacts]) -> Vec<DeviceId> {
    devices
        .iter()
        .enumerate()
        .filter(|(_, d)| device_allows(model, d))
        .map(|(i, _)| DeviceId(i as u32))
        .collect()
}

fn backend_allows(model: ModelFacts<'_>, device: &DeviceFacts) -> bool {
    let named = match (model.backends, device.backend) {
        // Real graphs are computed for real unless emulation is asked for.
        (None, _) => !(model.has_graph && device.emulated),
        // `auto` in a model's list: whichever real CPU runtime a group's `auto` chose.
        (Some(list), Some(backend)) => {
            list.contains(&backend)
                || (list.contains(&BackendKind::Auto) && backend.runs_on_cores())
        }
        // A custom backend is not nameable in a model's configuration.
        (Some(_), None) => false,
    };
    let runnable = model.has_graph || !device.needs_graph;
    named && runnable
}

fn why_none(model: ModelFacts<'_>) -> String {
    match model.backends {
        Some(list) => format!("it allows backends {list:?}"),
        None if !model.has_graph => {
            "it has no ONNX graph, so only sim devices can emulate it".into()
        }
        None => "it needs a device that computes real outputs (cpu); to emulate it on sim \
                 devices, set backends = [\"sim\"] in its config.toml"
            .into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SIM: DeviceFacts = DeviceFacts {
        backend: Some(BackendKind::Sim),
        pages: 100,
        emulated: true,
        needs_graph: false,
    };
    const CPU: DeviceFacts = DeviceFacts {
        backend: Some(BackendKind::Cpu),
        pages: 10,
        emulated: false,
        needs_graph: true,
    };

    fn model(pages: u32, has_graph: bool, backends: Option<&[BackendKind]>) -> ModelFacts<'_> {
        ModelFacts {
            name: "m",
            pages,
            has_graph,
            backends,
        }
    }

    #[test]
    fn real_graphs_go_to_real_devices_profiles_only_to_emulators() {
        assert_eq!(
            eligible_devices(model(1, true, None), &[SIM, CPU]),
            Ok(Some(vec![DeviceId(1)]))
        );
        let err = eligible_devices(model(1, true, None), &[SIM]).unwrap_err();
        assert!(err.to_string().contains("backends = [\"sim\"]"), "{err}");
        let sim = [BackendKind::Sim];
        assert_eq!(
            eligible_devices(model(1, true, Some(&sim)), &[SIM, CPU]),
            Ok(Some(vec![DeviceId(0)]))
        );
        assert_eq!(
            eligible_devices(model(1, false, None), &[SIM, CPU]),
            Ok(Some(vec![DeviceId(0)]))
        );
        let err = eligible_devices(model(1, false, None), &[CPU]).unwrap_err();
        assert!(err.to_string().contains("no ONNX graph"), "{err}");
    }

    #[test]
    fn named_backends_and_capacity_restrict() {
        let cpu_only = [BackendKind::Cpu];
        assert_eq!(
            eligible_devices(model(1, true, Some(&cpu_only)), &[SIM, CPU]),
            Ok(Some(vec![DeviceId(1)]))
        );
        // Too big for the cpu device, which is the only one allowed.
        let err = eligible_devices(model(20, true, Some(&cpu_only)), &[SIM, CPU]).unwrap_err();
        assert_eq!(
            err,
            IneligibleModel::TooLarge {
                name: "m".into(),
                pages: 20,
                largest: 10
            }
        );
        // `auto` names whichever real CPU runtime a group chose, never an emulator.
        let auto = [BackendKind::Auto];
        let ort = DeviceFacts {
            backend: Some(BackendKind::Ort),
            ..CPU
        };
        assert_eq!(
            eligible_devices(model(1, true, Some(&auto)), &[SIM, CPU, ort]),
            Ok(Some(vec![DeviceId(1), DeviceId(2)]))
        );
        // Fits only the larger device.
        let both = [BackendKind::Sim, BackendKind::Cpu];
        assert_eq!(
            eligible_devices(model(20, true, Some(&both)), &[SIM, CPU]),
            Ok(Some(vec![DeviceId(0)]))
        );
        let custom = DeviceFacts {
            backend: None,
            pages: 10,
            emulated: false,
            needs_graph: false,
        };
        assert_eq!(eligible_devices(model(1, false, None), &[custom]), Ok(None));
        assert!(eligible_devices(model(1, true, Some(&cpu_only)), &[custom]).is_err());
    }

    #[test]
    fn capabilities_decide_not_backend_names() {
        // A real device added in code that needs the graph (a cuda backend, say): real
        // graphs go to it, profile-only models do not.
        let real = DeviceFacts {
            backend: None,
            pages: 10,
            emulated: false,
            needs_graph: true,
        };
        assert_eq!(
            eligible_devices(model(1, true, None), &[SIM, real]),
            Ok(Some(vec![DeviceId(1)]))
        );
        let err = eligible_devices(model(1, false, None), &[real]).unwrap_err();
        assert!(err.to_string().contains("no ONNX graph"), "{err}");
        // An emulating device under a real device's name still never gets a real graph.
        let emulating_cpu = DeviceFacts {
            emulated: true,
            needs_graph: false,
            ..CPU
        };
        assert!(eligible_devices(model(1, true, None), &[emulating_cpu]).is_err());
    }
}
