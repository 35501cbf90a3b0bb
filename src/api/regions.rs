//! Triton's system shared-memory extension, the regions themselves: a client on the same
//! host names a POSIX shared-memory object (`/dev/shm/<key>`), an offset and a size, and
//! then places inputs and outputs in it instead of in its requests and answers, so that a
//! large tensor crosses no socket and is never parsed.
//!
//! A region is read and written through its open file (`pread`/`pwrite`), never mapped: a
//! client that shrinks its object while the server uses it gets an error for that
//! request, where a mapping would fault the whole process. Only objects directly under
//! `/dev/shm` can be named, never through a link, and only regular files: registering a
//! region lets its client have the server read and write that file, so the routes that
//! register are admin routes (`access.rs`), and at most [`MAX_REGIONS`] are held.

use serde::{Deserialize, Serialize};
use std::collections::btree_map::{BTreeMap, Entry};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};
use utoipa::ToSchema;

use super::codec;
use super::error::ApiError;
use super::v2::{self, Parameters};
use crate::model::DataType;

/// The parameter that places a tensor in a region (its data then not in the request, or
/// its answer written there instead of into the response).
pub(super) const REGION: &str = "shared_memory_region";
/// The bytes of the region the tensor takes.
pub(super) const BYTE_SIZE: &str = "shared_memory_byte_size";
/// Where in the region the tensor starts (0 if not given).
pub(super) const OFFSET: &str = "shared_memory_offset";

/// Which side of a request a tensor is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Side {
    Input,
    Output,
}

/// A tensor as messages name it: `input 'x'`, `output 'y'` (formatted only on an error).
#[derive(Clone, Copy, Debug)]
pub(super) struct Tensor<'a> {
    pub(super) side: Side,
    pub(super) name: &'a str,
}

impl std::fmt::Display for Tensor<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let side = match self.side {
            Side::Input => "input",
            Side::Output => "output",
        };
        write!(f, "{side} '{}'", self.name)
    }
}

/// Regions held at most: each keeps a file open.
pub const MAX_REGIONS: usize = 1024;

/// Where POSIX shared-memory objects live on Linux.
const SHM_DIR: &str = "/dev/shm";

/// A region as the client registered it (and as the status routes list it).
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema, PartialEq, Eq)]
pub struct RegionStatus {
    /// The name requests use for it.
    #[serde(default)]
    pub name: String,
    /// The shared-memory object's key, as the client's `shm_open` named it (`/input0`).
    pub key: String,
    /// Where the region starts in the object.
    #[serde(default)]
    pub offset: u64,
    /// The region's length.
    pub byte_size: u64,
}

/// One registered region: its open object and where in it the region lies.
#[derive(Debug)]
pub struct Region {
    status: RegionStatus,
    file: File,
}

/// The registered regions, by name; shared by every HTTP worker and the gRPC service.
#[derive(Debug)]
pub struct Regions {
    /// Where keys are looked up: `/dev/shm`.
    dir: PathBuf,
    /// Read by every request that places a tensor; written by the routes.
    by_name: RwLock<BTreeMap<String, Arc<Region>>>,
}

impl Default for Regions {
    fn default() -> Self {
        Self::under(PathBuf::from(SHM_DIR))
    }
}

/// Why a region could not be registered or used; every message names the region.
fn error(message: String) -> ApiError {
    ApiError::bad_input(message)
}

impl Regions {
    /// No regions, their keys looked up in `dir`.
    fn under(dir: PathBuf) -> Self {
        Self {
            dir,
            by_name: RwLock::default(),
        }
    }

    // A panic while the lock is held leaves the map whole (each change is one call), so a
    // poisoned lock is used as it is.
    fn read(&self) -> RwLockReadGuard<'_, BTreeMap<String, Arc<Region>>> {
        self.by_name.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, BTreeMap<String, Arc<Region>>> {
        self.by_name.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Opens `status.key` and holds it as region `status.name`; refused if the name is
    /// taken, the key is not a plain object name, or the object is shorter than the region.
    pub fn register(&self, status: RegionStatus) -> Result<(), ApiError> {
        let name = status.name.clone();
        if name.is_empty() {
            return Err(error("a shared-memory region needs a name".into()));
        }
        let file = open(&self.dir, &status)?;
        let mut regions = self.write();
        if regions.len() >= MAX_REGIONS {
            return Err(error(format!(
                "cannot register region '{name}': {MAX_REGIONS} regions are registered \
                 already; unregister some first"
            )));
        }
        match regions.entry(name) {
            Entry::Occupied(taken) => Err(error(format!(
                "shared-memory region '{}' is registered already; unregister it first",
                taken.key()
            ))),
            Entry::Vacant(free) => {
                free.insert(Arc::new(Region { status, file }));
                Ok(())
            }
        }
    }

    /// Forgets region `name`, or every region; requests that hold one finish with it.
    pub fn unregister(&self, name: Option<&str>) -> Result<(), ApiError> {
        match name {
            None => self.write().clear(),
            Some(name) => {
                if self.write().remove(name).is_none() {
                    return Err(unknown(name));
                }
            }
        }
        Ok(())
    }

    /// Region `name` as registered, or every region, by name.
    pub fn status(&self, name: Option<&str>) -> Result<Vec<RegionStatus>, ApiError> {
        let regions = self.read();
        if let Some(name) = name {
            let region = regions.get(name).ok_or_else(|| unknown(name))?;
            return Ok(vec![region.status.clone()]);
        }
        Ok(regions.values().map(|r| r.status.clone()).collect())
    }

    /// Where `tensor` is placed, if its `parameters` put it in a region: the region,
    /// checked to exist and to hold the bytes named.
    pub(super) fn placement(
        &self,
        tensor: Tensor<'_>,
        parameters: &Parameters,
    ) -> Result<Option<Placement>, ApiError> {
        let Some(name) = parameters.get(REGION) else {
            return Ok(None);
        };
        let name = name.as_str().ok_or_else(|| {
            error(format!(
                "{tensor}: parameter '{REGION}' must be a region's name, got {name}"
            ))
        })?;
        let size = |key| v2::size(parameters, key).map_err(|e| error(format!("{tensor}: {e}")));
        let byte_size = size(BYTE_SIZE)?.ok_or_else(|| {
            error(format!(
                "{tensor} is placed in region '{name}' without '{BYTE_SIZE}'"
            ))
        })? as u64;
        let offset = size(OFFSET)?.unwrap_or(0) as u64;
        let region = self
            .read()
            .get(name)
            .cloned()
            .ok_or_else(|| unknown(name))?;
        let end = offset.checked_add(byte_size);
        if end.is_none_or(|end| end > region.status.byte_size) {
            return Err(error(format!(
                "{tensor} takes {byte_size} bytes at offset {offset} of region '{name}', \
                 which holds {}",
                region.status.byte_size
            )));
        }
        Ok(Some(Placement {
            region,
            offset,
            byte_size,
        }))
    }
}

/// No region of that name.
fn unknown(name: &str) -> ApiError {
    error(format!(
        "no system shared-memory region '{name}' is registered (a CUDA one is not served \
         by this server); register it with POST /v2/systemsharedmemory/region/{name}/register"
    ))
}

/// The object `status.key` names, opened for reading and writing, checked to be a regular
/// file directly under `dir` that holds the whole region.
fn open(dir: &Path, status: &RegionStatus) -> Result<File, ApiError> {
    let (name, key) = (&status.name, &status.key);
    let object = key.strip_prefix('/').unwrap_or(key);
    if object.is_empty()
        || object.contains('/')
        || object.contains('\0')
        || object == "."
        || object == ".."
    {
        return Err(error(format!(
            "cannot register region '{name}': key '{key}' is not the name of a shared-memory \
             object ('/name', as given to shm_open)"
        )));
    }
    let cannot = |why: String| error(format!("cannot register region '{name}': {why}"));
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(dir.join(object))
        .map_err(|e| cannot(format!("cannot open shared-memory object '{key}': {e}")))?;
    let meta = file
        .metadata()
        .map_err(|e| cannot(format!("cannot read shared-memory object '{key}': {e}")))?;
    if !meta.is_file() {
        return Err(cannot(format!("'{key}' is not a shared-memory object")));
    }
    let end = status.offset.checked_add(status.byte_size);
    if end.is_none_or(|end| end > meta.len()) {
        return Err(cannot(format!(
            "{} bytes at offset {} do not fit in '{key}', which holds {}",
            status.byte_size,
            status.offset,
            meta.len()
        )));
    }
    Ok(file)
}

/// Where one tensor lies: a part of a registered region.
#[derive(Debug, Clone)]
pub(super) struct Placement {
    /// Held by the request, so that a region unregistered meanwhile is still its own.
    region: Arc<Region>,
    /// From the region's start.
    offset: u64,
    /// The bytes it takes.
    byte_size: u64,
}

impl Placement {
    /// The region's name, as the answer names it.
    pub(super) fn name(&self) -> &str {
        &self.region.status.name
    }

    /// The bytes of input `name`, read from here: checked to be `count` elements of
    /// `datatype` before reading (a fixed-size datatype's length, so that nothing larger
    /// is read) and after (BYTES' length prefixes).
    pub(super) fn read_input(
        &self,
        name: &str,
        datatype: DataType,
        count: usize,
    ) -> Result<Vec<u8>, ApiError> {
        let len = self.byte_size as usize;
        codec::check_raw_len(name, datatype, count, len).map_err(ApiError::bad_input)?;
        let bytes = self.read(Tensor {
            side: Side::Input,
            name,
        })?;
        codec::check_raw(name, datatype, count, &bytes).map_err(ApiError::bad_input)?;
        Ok(bytes)
    }

    /// Writes output `name`'s `data` here. The answer then names the output (its
    /// datatype and shape) with neither data nor parameters, as Triton's server answers:
    /// Triton's C++ HTTP client (perf_analyzer's) takes an output with parameters to be
    /// binary data and fails without its `binary_data_size`.
    pub(super) fn write_output(&self, name: &str, data: &[u8]) -> Result<(), ApiError> {
        let tensor = Tensor {
            side: Side::Output,
            name,
        };
        self.write(tensor, data)
    }

    /// The tensor's bytes, read from the region.
    fn read(&self, tensor: Tensor<'_>) -> Result<Vec<u8>, ApiError> {
        let mut bytes = vec![0; self.byte_size as usize];
        let at = self.region.status.offset + self.offset;
        self.region
            .file
            .read_exact_at(&mut bytes, at)
            .map_err(|e| {
                error(format!(
                    "{tensor}: cannot read region '{}': {e}",
                    self.name()
                ))
            })?;
        Ok(bytes)
    }

    /// Writes `data` (an output's bytes) into the region, which must hold them.
    fn write(&self, tensor: Tensor<'_>, data: &[u8]) -> Result<(), ApiError> {
        if data.len() as u64 > self.byte_size {
            return Err(error(format!(
                "{tensor} has {} bytes; its place in region '{}' holds {}",
                data.len(),
                self.name(),
                self.byte_size
            )));
        }
        let at = self.region.status.offset + self.offset;
        self.region.file.write_all_at(data, at).map_err(|e| {
            error(format!(
                "{tensor}: cannot write region '{}': {e}",
                self.name()
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory standing for `/dev/shm`, with one object of `len` bytes, `0..len`.
    fn dir_with(object: &str, len: usize) -> (PathBuf, Regions) {
        let dir =
            std::env::temp_dir().join(format!("clockwork-regions-{}-{object}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let bytes: Vec<u8> = (0..len).map(|i| i as u8).collect();
        std::fs::write(dir.join(object), bytes).unwrap();
        (dir.clone(), Regions::under(dir))
    }

    fn region(name: &str, key: &str, offset: u64, byte_size: u64) -> RegionStatus {
        RegionStatus {
            name: name.into(),
            key: key.into(),
            offset,
            byte_size,
        }
    }

    const X: Tensor = Tensor {
        side: Side::Input,
        name: "x",
    };

    fn placed(name: &str, offset: u64, byte_size: u64) -> Parameters {
        let mut p = Parameters::new();
        p.insert(REGION.into(), name.into());
        p.insert(BYTE_SIZE.into(), byte_size.into());
        p.insert(OFFSET.into(), offset.into());
        p
    }

    /// A tensor is read from the region's offset plus its own, and written there.
    /// Mutation that breaks it: reading at the tensor's offset alone.
    #[test]
    fn tensors_are_read_and_written_at_the_regions_offset_plus_theirs() {
        let (dir, regions) = dir_with("reads", 64);
        regions.register(region("r", "/reads", 16, 32)).unwrap();
        let at = regions.placement(X, &placed("r", 4, 8)).unwrap();
        let at = at.expect("placed");
        assert_eq!(at.read(X).unwrap(), (20..28).collect::<Vec<u8>>());
        at.write(X, &[9, 9]).unwrap();
        let after = std::fs::read(dir.join("reads")).unwrap();
        assert_eq!(&after[18..24], &[18, 19, 9, 9, 22, 23]);
        assert!(at.write(X, &[0; 9]).is_err(), "larger than its place");
        let _ = std::fs::remove_dir_all(dir);
    }

    /// Names that leave the directory, links and regions past the object's end are
    /// refused; a name is registered once. Mutation that breaks it: no `O_NOFOLLOW`.
    #[test]
    fn only_whole_objects_directly_in_the_directory_register() {
        let (dir, regions) = dir_with("obj", 8);
        std::os::unix::fs::symlink(dir.join("obj"), dir.join("link")).unwrap();
        for key in ["/../obj", "/a/b", "/", "..", "/link", "/missing"] {
            let refused = regions.register(region("r", key, 0, 8));
            assert!(refused.is_err(), "{key} registered");
        }
        assert!(regions.register(region("r", "/obj", 4, 8)).is_err());
        regions.register(region("r", "obj", 0, 8)).unwrap();
        assert!(regions.register(region("r", "/obj", 0, 4)).is_err());
        let all = regions.status(None).unwrap();
        assert_eq!(all, vec![region("r", "obj", 0, 8)]);
        let _ = std::fs::remove_dir_all(dir);
    }

    /// A placement past its region, or in a region not registered, is refused; a region
    /// unregistered stays readable by a request that holds it.
    #[test]
    fn placements_are_checked_and_hold_their_region() {
        let (dir, regions) = dir_with("held", 16);
        regions.register(region("r", "/held", 0, 16)).unwrap();
        assert!(regions.placement(X, &placed("r", 8, 9)).is_err());
        assert!(regions.placement(X, &placed("other", 0, 1)).is_err());
        let mut no_size = placed("r", 0, 1);
        no_size.remove(BYTE_SIZE);
        assert!(regions.placement(X, &no_size).is_err());
        let held = regions.placement(X, &placed("r", 8, 8)).unwrap().unwrap();
        regions.unregister(Some("r")).unwrap();
        assert!(regions.status(Some("r")).is_err());
        assert_eq!(held.read(X).unwrap(), (8..16).collect::<Vec<u8>>());
        assert!(regions.unregister(Some("r")).is_err());
        let _ = std::fs::remove_dir_all(dir);
    }
}
