//! Host-to-device weight transfers from pinned (page-locked) host memory:
//! the bandwidth measurement, and the looping background LOAD used to see
//! whether transfers disturb inference.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{anyhow, Context as _, Result};
use cudarc::driver::{CudaContext, CudaSlice, CudaStream, PinnedHostSlice};
use serde::Serialize;

use crate::gpu::Timer;
use clockwork::stats::Summary;

/// A weight blob in pinned host memory and its destination on the device.
pub struct Staging {
    host: PinnedHostSlice<u8>,
    device: CudaSlice<u8>,
}

impl Staging {
    /// Allocates `bytes` of pinned host memory (filled, so every page is
    /// touched) and `bytes` of device memory on `stream`.
    pub fn new(ctx: &Arc<CudaContext>, stream: &Arc<CudaStream>, bytes: usize) -> Result<Staging> {
        // Flags 0 = plain cuMemHostAlloc, like cudaMallocHost. cudarc's
        // `alloc_pinned` would make it write-combined, which a serving
        // runtime's weight cache would not use (host reads of it are slow).
        // SAFETY: the memory is initialised by the fill below before any read.
        let mut host = unsafe { ctx.alloc_pinned_with_flags::<u8>(bytes, 0) }
            .context("allocating pinned host memory")?;
        host.as_mut_slice()?.fill(0x5a);
        let device = stream
            .alloc_zeros::<u8>(bytes)
            .context("allocating device memory")?;
        Ok(Staging { host, device })
    }

    pub fn len(&self) -> usize {
        self.device.len()
    }
}

/// Enqueues copies of `range` of the blob from host to device, `chunk` bytes per copy.
fn enqueue_copies(
    stream: &Arc<CudaStream>,
    host: &[u8],
    device: &mut CudaSlice<u8>,
    range: Range<usize>,
    chunk: usize,
) -> Result<()> {
    let mut offset = range.start;
    while offset < range.end {
        let end = range.end.min(offset + chunk.max(1));
        let src = host
            .get(offset..end)
            .ok_or_else(|| anyhow!("copy {offset}..{end} outside the host blob"))?;
        let mut dst = device
            .try_slice_mut(offset..end)
            .ok_or_else(|| anyhow!("copy {offset}..{end} outside the device blob"))?;
        stream.memcpy_htod(src, &mut dst)?;
        offset = end;
    }
    Ok(())
}

/// One bandwidth case: copy `bytes` from the start of the blob in `chunk`-sized copies.
pub struct TransferCase {
    pub name: &'static str,
    pub bytes: usize,
    pub chunk: usize,
}

/// How often to repeat each case.
pub struct Repetitions {
    pub warmup: usize,
    pub measured: usize,
}

/// Measured bandwidth of one [`TransferCase`].
#[derive(Debug, Clone, Serialize)]
pub struct TransferResult {
    pub case: &'static str,
    pub bytes: usize,
    pub chunk_bytes: usize,
    /// GB/s (10^9 bytes per second) per repetition.
    pub gbps: Summary,
    /// GPU time per repetition, microseconds.
    pub time_us: Summary,
}

/// Times `case` on `stream` with CUDA events, `reps.measured` times after `reps.warmup`.
pub fn measure(
    stream: &Arc<CudaStream>,
    staging: &mut Staging,
    case: &TransferCase,
    reps: &Repetitions,
) -> Result<TransferResult> {
    let timer = Timer::new(stream.context())?;
    let host = staging.host.as_slice()?;
    let mut times_us = Vec::with_capacity(reps.measured);
    for rep in 0..reps.warmup + reps.measured {
        timer.start(stream)?;
        enqueue_copies(stream, host, &mut staging.device, 0..case.bytes, case.chunk)?;
        let ms = timer.stop(stream)?;
        if rep >= reps.warmup {
            times_us.push(ms * 1e3);
        }
    }
    // bytes per microsecond / 1000 = GB/s.
    let gbps: Vec<f64> = times_us
        .iter()
        .map(|us| case.bytes as f64 / us / 1e3)
        .collect();
    let empty = || anyhow!("transfer case {} has no measured repetitions", case.name);
    Ok(TransferResult {
        case: case.name,
        bytes: case.bytes,
        chunk_bytes: case.chunk,
        gbps: Summary::of(&gbps).ok_or_else(empty)?,
        time_us: Summary::of(&times_us).ok_or_else(empty)?,
    })
}

/// Shape of the background LOAD.
pub struct LoadParams {
    pub page_bytes: usize,
    /// Pages queued on the copy stream at once: enough to keep the copy
    /// engine busy without letting the queue grow without bound.
    pub in_flight: usize,
}

/// What the background LOAD achieved while it ran.
#[derive(Debug, Clone, Serialize)]
pub struct LoadReport {
    pub pages: usize,
    pub bytes: u64,
    pub seconds: f64,
    pub gbps: f64,
}

/// Runs `work` while pinned-to-device page copies loop on `stream` in a
/// second thread, and reports the bandwidth the copies got meanwhile.
///
/// `work` starts only once the first `in_flight` pages are queued, so it is
/// disturbed from its first run.
pub fn with_background_load<T>(
    stream: &Arc<CudaStream>,
    staging: &mut Staging,
    params: &LoadParams,
    work: impl FnOnce() -> Result<T>,
) -> Result<(T, LoadReport)> {
    let stop = AtomicBool::new(false);
    let (started_tx, started_rx) = mpsc::channel();
    std::thread::scope(|scope| {
        let stop = &stop;
        let loader = scope.spawn(move || load_loop(stream, staging, params, stop, started_tx));
        // A closed channel means the loader failed before starting; its
        // error comes out of join below.
        let work_result = started_rx.recv().ok().map(|()| work());
        stop.store(true, Ordering::Relaxed);
        let load = loader
            .join()
            .map_err(|_| anyhow!("the background load thread panicked"))??;
        let output = work_result.ok_or_else(|| anyhow!("the background load never started"))??;
        Ok((output, load))
    })
}

fn load_loop(
    stream: &Arc<CudaStream>,
    staging: &mut Staging,
    params: &LoadParams,
    stop: &AtomicBool,
    started: mpsc::Sender<()>,
) -> Result<LoadReport> {
    let page = params.page_bytes.clamp(1, staging.len());
    let pages_in_blob = staging.len() / page;
    let ring = (0..params.in_flight.max(1))
        .map(|_| stream.context().new_event(None))
        .collect::<Result<Vec<_>, _>>()?;
    let host = staging.host.as_slice()?;
    let mut started = Some(started);
    let begin = Instant::now();
    let mut pages = 0;
    while !stop.load(Ordering::Relaxed) {
        let slot = &ring[pages % ring.len()];
        // Wait for the copy that last used this slot (an unrecorded event
        // is already complete).
        slot.synchronize()?;
        let offset = (pages % pages_in_blob) * page;
        enqueue_copies(
            stream,
            host,
            &mut staging.device,
            offset..offset + page,
            page,
        )?;
        slot.record(stream)?;
        pages += 1;
        if pages == ring.len() {
            if let Some(tx) = started.take() {
                // The receiver only goes away if the main thread is already
                // failing; the loop then ends at the stop flag.
                let _ = tx.send(());
            }
        }
    }
    stream.synchronize()?;
    let seconds = begin.elapsed().as_secs_f64();
    let bytes = (pages * page) as u64;
    Ok(LoadReport {
        pages,
        bytes,
        seconds,
        gbps: bytes as f64 / seconds / 1e9,
    })
}
