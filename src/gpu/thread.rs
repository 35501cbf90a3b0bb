//! Runs a blocking device on a thread of its own.
//!
//! Real backends (cpu with tract, cuda with cudarc) do blocking work and often need
//! thread-bound state (a CUDA context is current on one thread). They implement
//! [`BlockingDevice`]; [`DeviceThread`] owns a dedicated thread for it and turns each call
//! into a future the executor awaits. Jobs run in the order they are sent.

use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use tokio::sync::oneshot;

use super::{
    Backend, BackendFuture, BackendInfo, BatchOutputs, DeviceError, Executed, InferJob,
    ModelArtifact,
};
use crate::model::ModelId;
use crate::time::{nanos, Nanos};

/// A device whose operations block the calling thread.
pub trait BlockingDevice: Send + 'static {
    fn info(&self) -> BackendInfo;
    fn load(&mut self, artifact: &ModelArtifact) -> Result<(), DeviceError>;
    fn unload(&mut self, model: ModelId) -> Result<(), DeviceError>;
    fn infer(&mut self, job: &InferJob) -> Result<BatchOutputs, DeviceError>;
    /// Duration of the last operation as the device timed it, if it can (CUDA events).
    fn last_device_time(&self) -> Option<Nanos> {
        None
    }
}

type Reply<T> = oneshot::Sender<Result<Executed<T>, DeviceError>>;

enum Job {
    Load(Arc<ModelArtifact>, Reply<()>),
    Unload(ModelId, Reply<()>),
    Infer(InferJob, Reply<BatchOutputs>),
}

/// A [`Backend`] over a blocking device on its own thread.
pub struct DeviceThread {
    info: BackendInfo,
    jobs: Option<mpsc::Sender<Job>>,
    thread: Option<JoinHandle<()>>,
}

impl DeviceThread {
    /// Moves `device` onto a new thread named `name`.
    pub fn spawn(name: String, device: impl BlockingDevice) -> Result<Self, DeviceError> {
        let info = device.info();
        let (jobs, queue) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name(name)
            .spawn(move || serve(device, queue))
            .map_err(|e| DeviceError::Gone(e.to_string()))?;
        Ok(Self {
            info,
            jobs: Some(jobs),
            thread: Some(thread),
        })
    }

    fn submit<T: 'static>(&self, job: impl FnOnce(Reply<T>) -> Job) -> BackendFuture<Executed<T>> {
        let (reply, done) = oneshot::channel();
        let sent = self
            .jobs
            .as_ref()
            .is_some_and(|jobs| jobs.send(job(reply)).is_ok());
        Box::pin(async move {
            if !sent {
                return Err(DeviceError::Gone("device thread has stopped".into()));
            }
            done.await
                .unwrap_or_else(|_| Err(DeviceError::Gone("device thread dropped the job".into())))
        })
    }
}

impl Drop for DeviceThread {
    fn drop(&mut self) {
        // Closing the channel ends the thread's loop once queued jobs are done.
        self.jobs.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn serve(mut device: impl BlockingDevice, queue: mpsc::Receiver<Job>) {
    fn timed<T, D: BlockingDevice>(
        device: &mut D,
        work: impl FnOnce(&mut D) -> Result<T, DeviceError>,
    ) -> Result<Executed<T>, DeviceError> {
        let begin = Instant::now();
        let value = work(device)?;
        let host = nanos(begin.elapsed());
        Ok(Executed {
            value,
            device_time: Some(device.last_device_time().unwrap_or(host)),
        })
    }
    for job in queue {
        // A reply nobody waits for any more is not an error of the device.
        match job {
            Job::Load(artifact, reply) => {
                let _ = reply.send(timed(&mut device, |d| d.load(&artifact)));
            }
            Job::Unload(model, reply) => {
                let _ = reply.send(timed(&mut device, |d| d.unload(model)));
            }
            Job::Infer(job, reply) => {
                let _ = reply.send(timed(&mut device, |d| d.infer(&job)));
            }
        }
    }
}

impl Backend for DeviceThread {
    fn info(&self) -> BackendInfo {
        self.info.clone()
    }

    fn load(&self, artifact: Arc<ModelArtifact>) -> BackendFuture<Executed<()>> {
        self.submit(|reply| Job::Load(artifact, reply))
    }

    fn unload(&self, model: ModelId) -> BackendFuture<Executed<()>> {
        self.submit(|reply| Job::Unload(model, reply))
    }

    fn infer(&self, job: InferJob) -> BackendFuture<Executed<BatchOutputs>> {
        self.submit(|reply| Job::Infer(job, reply))
    }
}
