//! Finding and loading ONNX Runtime's shared library, once per process.
//!
//! The library is not linked at build time (the `ort` crate's `load-dynamic`): it is the
//! `libonnxruntime.so` of the `onnxruntime` wheel, which `scripts/onnxruntime.sh` installs
//! and whose path it prints. A device group names it (`[devices.ort] library`), or
//! `ORT_DYLIB_PATH` does. A process holds one ONNX Runtime: the first library loaded
//! serves every `ort` device, and naming another one later is an error, not a silent
//! mix.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use ort::environment::Environment;

use super::OrtError;

/// The variable naming the library when the configuration does not.
pub const LIBRARY_VARIABLE: &str = "ORT_DYLIB_PATH";

/// How to get the library, said in every error about it.
const HOW_TO_FIX: &str = "run scripts/onnxruntime.sh (it installs the onnxruntime wheel \
    under target/ and prints the library's path), then export ORT_DYLIB_PATH=<that path> \
    or set `library` under [devices.ort]";

/// The library loaded in this process and its environment, once loaded.
static LOADED: Mutex<Option<(PathBuf, Environment)>> = Mutex::new(None);

/// The path to load: the configured one, else `ORT_DYLIB_PATH`.
pub fn resolve(configured: Option<&Path>) -> Result<PathBuf, OrtError> {
    let path = match configured {
        Some(path) => path.to_path_buf(),
        None => match std::env::var_os(LIBRARY_VARIABLE) {
            Some(path) if !path.is_empty() => PathBuf::from(path),
            _ => {
                return Err(OrtError::Library(format!(
                    "no library named (neither [devices.ort] library nor {LIBRARY_VARIABLE}): \
                     {HOW_TO_FIX}"
                )))
            }
        },
    };
    if !path.is_file() {
        return Err(OrtError::Library(format!(
            "{} does not exist: {HOW_TO_FIX}",
            path.display()
        )));
    }
    Ok(path)
}

/// The ONNX Runtime environment of this process, loading the library on first use from
/// `configured` (or `ORT_DYLIB_PATH`). Once loaded, `None` means "the one loaded".
pub fn environment(configured: Option<&Path>) -> Result<Environment, OrtError> {
    let mut loaded = LOADED
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some((path, environment)) = loaded.as_ref() {
        return match configured {
            Some(asked) if asked != path => Err(OrtError::Library(format!(
                "ONNX Runtime is already loaded from {}; a process holds one, so {} cannot \
                 be loaded too (name the same library in every ort group)",
                path.display(),
                asked.display()
            ))),
            _ => Ok(environment.clone()),
        };
    }
    let path = resolve(configured)?;
    let failed = |e: String| OrtError::Library(format!("{}: {e}: {HOW_TO_FIX}", path.display()));
    let environment = ort::init_from(&path)
        .map_err(|e| failed(e.to_string()))?
        .with_name("clockwork")
        .with_telemetry(false)
        .build()
        .map_err(|e| failed(e.to_string()))?;
    *loaded = Some((path, environment.clone()));
    Ok(environment)
}

/// Whether ONNX Runtime can be loaded here, and if not why: what tests and benchmarks
/// print when they skip the `ort` backend.
pub fn available() -> Result<PathBuf, OrtError> {
    environment(None)?;
    let loaded = LOADED
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    Ok(loaded.as_ref().map(|(p, _)| p.clone()).unwrap_or_default())
}
