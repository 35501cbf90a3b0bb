//! Opening the GPU: driver and cuBLAS discovery, context creation, device facts.
//!
//! cudarc loads libcuda and libcublas lazily and panics when a library is
//! missing, so everything here checks for the libraries first and turns each
//! failure into an [`InitError`] the caller can report and exit on.

use std::sync::Arc;

use cudarc::cublas::{sys as cublas_sys, CudaBlas};
use cudarc::driver::{sys as driver_sys, CudaContext, CudaEvent, CudaStream, DriverError};
use serde::Serialize;

/// Why the probe could not get a usable GPU; each maps to a non-zero exit.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    #[error(
        "no CUDA driver found: could not load libcuda.so (is the NVIDIA driver installed \
         and its library directory on LD_LIBRARY_PATH?)"
    )]
    NoDriver,
    #[error("the CUDA driver failed to initialise: {0}")]
    DriverInit(DriverError),
    #[error("no CUDA device with ordinal {ordinal}: the driver reports {count} device(s)")]
    NoDevice { ordinal: usize, count: i32 },
    #[error("cannot create a CUDA context on device {ordinal}: {source}")]
    Context { ordinal: usize, source: DriverError },
    #[error(
        "no cuBLAS library found: could not load libcublas.so (install the CUDA toolkit's \
         cuBLAS and put its library directory on LD_LIBRARY_PATH)"
    )]
    NoCublas,
    #[error("cannot create a cuBLAS handle: {0}")]
    Cublas(cudarc::cublas::result::CublasError),
    #[error("cannot query or configure the device: {0}")]
    Query(DriverError),
}

/// Facts about the device that a reader of the results needs.
#[derive(Debug, Clone, Serialize)]
pub struct DeviceInfo {
    pub ordinal: usize,
    pub name: String,
    pub compute_capability: String,
    pub total_memory_bytes: usize,
    /// As reported by cuDriverGetVersion, e.g. 12080 for CUDA 12.8.
    pub driver_version: i32,
}

/// An open device: a context, and the facts about it.
pub struct Gpu {
    pub ctx: Arc<CudaContext>,
    pub info: DeviceInfo,
}

/// Opens device `ordinal`, checking for the driver before touching it.
pub fn open(ordinal: usize) -> Result<Gpu, InitError> {
    // SAFETY: only tries to dlopen the driver library; no CUDA call is made.
    if !unsafe { driver_sys::is_culib_present() } {
        return Err(InitError::NoDriver);
    }
    let count = CudaContext::device_count().map_err(InitError::DriverInit)?;
    if count <= 0 || ordinal >= count as usize {
        return Err(InitError::NoDevice { ordinal, count });
    }
    let ctx = CudaContext::new(ordinal).map_err(|source| InitError::Context { ordinal, source })?;
    // SAFETY: called before any buffer exists. Every buffer the probe makes is
    // used on the one stream that allocated it, and streams are synchronised
    // before buffers drop, so cudarc's per-buffer event tracking is not needed;
    // left on, it would add several event calls to every GEMM launch and
    // inflate the very launch-bound batch-1 latency being measured.
    unsafe { ctx.disable_event_tracking() };
    let info = describe(&ctx).map_err(InitError::Query)?;
    Ok(Gpu { ctx, info })
}

fn describe(ctx: &Arc<CudaContext>) -> Result<DeviceInfo, DriverError> {
    let (major, minor) = ctx.compute_capability()?;
    let mut driver_version = 0;
    // SAFETY: the driver is loaded and initialised (a context exists), and the
    // pointer is to a live local.
    unsafe { driver_sys::cuDriverGetVersion(&mut driver_version) }.result()?;
    Ok(DeviceInfo {
        ordinal: ctx.ordinal(),
        name: ctx.name()?,
        compute_capability: format!("{major}.{minor}"),
        total_memory_bytes: ctx.total_mem()?,
        driver_version,
    })
}

/// A cuBLAS handle bound to `stream`, optionally allowed to use TF32 tensor cores.
pub fn blas(stream: &Arc<CudaStream>, tf32: bool) -> Result<CudaBlas, InitError> {
    // SAFETY: only tries to dlopen the cuBLAS library.
    if !unsafe { cublas_sys::is_culib_present() } {
        return Err(InitError::NoCublas);
    }
    let blas = CudaBlas::new(stream.clone()).map_err(InitError::Cublas)?;
    if tf32 {
        let mode = cublas_sys::cublasMath_t::CUBLAS_TF32_TENSOR_OP_MATH;
        // SAFETY: the handle is live for the duration of the call.
        unsafe { cublas_sys::cublasSetMathMode(*blas.handle(), mode) }
            .result()
            .map_err(InitError::Cublas)?;
    }
    Ok(blas)
}

/// A pair of timing events measuring GPU time between two points on a stream.
pub struct Timer {
    start: CudaEvent,
    end: CudaEvent,
}

impl Timer {
    pub fn new(ctx: &Arc<CudaContext>) -> Result<Timer, DriverError> {
        // CU_EVENT_DEFAULT: timing enabled (cudarc's default disables it).
        let flags = Some(driver_sys::CUevent_flags::CU_EVENT_DEFAULT);
        Ok(Timer {
            start: ctx.new_event(flags)?,
            end: ctx.new_event(flags)?,
        })
    }

    /// Marks the start of the timed work on `stream`.
    pub fn start(&self, stream: &CudaStream) -> Result<(), DriverError> {
        self.start.record(stream)
    }

    /// Marks the end of the timed work, waits for it, and returns the GPU
    /// time between the marks in milliseconds.
    pub fn stop(&self, stream: &CudaStream) -> Result<f64, DriverError> {
        self.end.record(stream)?;
        Ok(f64::from(self.start.elapsed_ms(&self.end)?))
    }
}
