//! The model repository on disk, in Triton's layout:
//!
//! ```text
//! models/
//!   mlp/
//!     config.toml          # optional: batch sizes, SLO, backends, declared tensors
//!     1/
//!       model.onnx
//!       profile.json       # written by profiling; reused while the model is unchanged
//! ```
//!
//! A directory whose `config.toml` has a `[pipeline]` table (and no versions) declares a
//! pipeline of the models beside it ([`Repository::pipeline`], `crate::pipeline::decl`).
//!
//! [`Repository`] finds and reads models; [`prepare`] turns one into a registration
//! (its spec from the graph and the configuration, its profile measured or reused); the
//! built-in [`zoo`] writes real models into it. A model that cannot be read, configured
//! or built is refused with a [`RepositoryError`] naming it and the problem, and never
//! stops the other models.

pub mod model_config;
pub mod onnx_builder;
mod prepare;
mod store;
pub mod zoo;

use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use model_config::ModelFileConfig;

use crate::pipeline::{PipelineDecl, PipelineFile};
pub use prepare::{prepare, PrepareSettings, Registration};

/// The file holding a version's graph.
pub const MODEL_FILE: &str = "model.onnx";
/// The per-model configuration file.
pub const CONFIG_FILE: &str = "config.toml";
/// The stored profile of a version.
pub const PROFILE_FILE: &str = "profile.json";

/// Why a model of the repository cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum RepositoryError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("model '{model}' is not in the repository {root}")]
    NotFound { model: String, root: String },
    /// A name that is a path, or a model directory that leads out of the repository
    /// (a symbolic link): models are read from inside the repository only.
    #[error("model name '{model}' is refused: {reason}; models are read only from inside the repository")]
    Outside { model: String, reason: &'static str },
    #[error("model '{model}': no version directory with a {MODEL_FILE} (expected {dir}/<version>/{MODEL_FILE})")]
    NoVersion { model: String, dir: String },
    #[error("model '{model}': version {version} is not in the repository")]
    MissingVersion { model: String, version: u64 },
    #[error("model '{model}': invalid {CONFIG_FILE}: {message}")]
    Config { model: String, message: String },
    #[error("model '{model}': {source}")]
    Graph {
        model: String,
        #[source]
        source: crate::gpu::cpu::CpuError,
    },
    #[error("model '{model}': {source}")]
    Ort {
        model: String,
        #[source]
        source: crate::gpu::ort::OrtError,
    },
    #[error("no zoo model named '{name}' (the zoo has: {known})", known = zoo::MODELS.join(", "))]
    UnknownZooModel { name: String },
}

impl RepositoryError {
    fn io(path: &Path, source: std::io::Error) -> Self {
        RepositoryError::Io {
            path: path.display().to_string(),
            source,
        }
    }
}

/// A repository and how its models are prepared: what the runtime keeps to register
/// models on demand.
#[derive(Clone, Debug)]
pub struct RepositorySource {
    pub repository: Repository,
    pub settings: PrepareSettings,
}

impl RepositorySource {
    /// Reads and prepares model `name` (profiling it unless a stored profile applies).
    pub fn prepare(&self, name: &str) -> Result<Registration, RepositoryError> {
        prepare(&self.repository.read(name)?, &self.settings)
    }
}

/// One model as stored: its configuration and the graph of the version to serve.
#[derive(Clone, Debug)]
pub struct StoredModel {
    pub name: String,
    pub version: u64,
    /// The version's directory (where its profile is kept).
    pub dir: PathBuf,
    pub config: ModelFileConfig,
    pub bytes: Arc<[u8]>,
}

/// A repository rooted at a directory.
#[derive(Clone, Debug)]
pub struct Repository {
    root: PathBuf,
}

impl Repository {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Names of the models present (every directory under the root), sorted. A missing
    /// root is an empty repository.
    pub fn names(&self) -> Result<Vec<String>, RepositoryError> {
        let entries = match std::fs::read_dir(&self.root) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(RepositoryError::io(&self.root, e)),
        };
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| RepositoryError::io(&self.root, e))?;
            if entry.path().is_dir() {
                if let Some(name) = entry.file_name().to_str() {
                    if !name.starts_with('.') {
                        names.push(name.to_owned());
                    }
                }
            }
        }
        names.sort();
        Ok(names)
    }

    /// The pipeline declared in `name`'s directory, if its `config.toml` has a
    /// `[pipeline]` table (a pipeline directory has no versions); `None` for a model.
    pub fn pipeline(&self, name: &str) -> Result<Option<PipelineDecl>, RepositoryError> {
        let dir = match self.model_dir(name) {
            Ok(dir) => dir,
            Err(RepositoryError::NotFound { .. }) => return Ok(None),
            Err(refused) => return Err(refused),
        };
        let path = dir.join(CONFIG_FILE);
        if !path.is_file() {
            return Ok(None);
        }
        let text = std::fs::read_to_string(&path).map_err(|e| RepositoryError::io(&path, e))?;
        if !PipelineFile::declares_pipeline(&text) {
            return Ok(None);
        }
        let file = PipelineFile::parse(&text).map_err(|message| RepositoryError::Config {
            model: name.to_owned(),
            message,
        })?;
        Ok(Some(file.pipeline))
    }

    /// The directory of model `name`: one directory of the repository, never a path out
    /// of it. `Outside` for a name that is a path (or `.`, `..`) and for a directory that
    /// resolves outside the root (a symbolic link out); `NotFound` if there is none.
    pub fn model_dir(&self, name: &str) -> Result<PathBuf, RepositoryError> {
        let outside = |reason| RepositoryError::Outside {
            model: name.to_owned(),
            reason,
        };
        check_name(name).map_err(outside)?;
        let dir = self.root.join(name);
        if !dir.is_dir() {
            return Err(RepositoryError::NotFound {
                model: name.to_owned(),
                root: self.root.display().to_string(),
            });
        }
        let resolved = dir
            .canonicalize()
            .map_err(|e| RepositoryError::io(&dir, e))?;
        let root = (self.root.canonicalize()).map_err(|e| RepositoryError::io(&self.root, e))?;
        if resolved.parent() != Some(root.as_path()) {
            return Err(outside("its directory resolves outside the repository"));
        }
        Ok(dir)
    }

    /// Reads model `name`: its configuration and the graph of the version it serves.
    pub fn read(&self, name: &str) -> Result<StoredModel, RepositoryError> {
        let dir = self.model_dir(name)?;
        let config = read_config(name, &dir.join(CONFIG_FILE))?;
        let versions = versions(&dir)?;
        let version = match config.version {
            Some(v) if versions.contains(&v) => v,
            Some(v) => {
                return Err(RepositoryError::MissingVersion {
                    model: name.to_owned(),
                    version: v,
                })
            }
            None => *versions.last().ok_or_else(|| RepositoryError::NoVersion {
                model: name.to_owned(),
                dir: dir.display().to_string(),
            })?,
        };
        let version_dir = dir.join(version.to_string());
        let path = version_dir.join(MODEL_FILE);
        let bytes = std::fs::read(&path).map_err(|e| RepositoryError::io(&path, e))?;
        Ok(StoredModel {
            name: name.to_owned(),
            version,
            dir: version_dir,
            config,
            bytes: bytes.into(),
        })
    }
}

/// Why `name` cannot name a model directory, if it cannot: it must be one plain path
/// component (checked before anything is read, so a hostile name touches nothing).
pub fn check_name(name: &str) -> Result<(), &'static str> {
    if name.is_empty() || name == "." || name == ".." {
        return Err("it is not a directory name");
    }
    if name.contains(['/', '\\']) {
        return Err("it is a path, not a name");
    }
    if name.contains('\0') || name.contains(':') {
        return Err("it holds a character not allowed in a model name");
    }
    Ok(())
}

fn read_config(model: &str, path: &Path) -> Result<ModelFileConfig, RepositoryError> {
    match std::fs::read_to_string(path) {
        Ok(text) => ModelFileConfig::parse(&text).map_err(|message| RepositoryError::Config {
            model: model.to_owned(),
            message,
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(ModelFileConfig::default()),
        Err(e) => Err(RepositoryError::io(path, e)),
    }
}

/// Numbered version directories holding a graph, ascending.
fn versions(dir: &Path) -> Result<Vec<u64>, RepositoryError> {
    let mut versions = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| RepositoryError::io(dir, e))? {
        let entry = entry.map_err(|e| RepositoryError::io(dir, e))?;
        let version = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u64>().ok());
        if let Some(version) = version {
            if entry.path().join(MODEL_FILE).is_file() {
                versions.push(version);
            }
        }
    }
    versions.sort_unstable();
    Ok(versions)
}

#[cfg(test)]
mod tests;
