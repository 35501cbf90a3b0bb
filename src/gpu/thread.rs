//! Runs a blocking device on a thread of its own.
//!
//! Real backends (cpu with tract, cuda with cudarc) do blocking work and often need
//! thread-bound state (a CUDA context is current on one thread). They implement
//! [`BlockingDevice`]; [`DeviceThread`] owns a dedicated thread for it and turns each call
//! into a future the executor awaits. Jobs run in the order they are sent. A thread may
//! be pinned to a core of its own (`src/cores.rs` says which), so that nothing else runs
//! where the device's timings are measured and planned.

use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use tokio::sync::oneshot;

use super::contention::{Contention, Sampler};
use super::{
    Backend, BackendFuture, BackendInfo, BatchOutputs, DeviceError, Executed, InferJob,
    ModelArtifact,
};
use crate::cores::{self, Core};
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
    /// The core its thread was pinned to, if any.
    core: Option<Core>,
    jobs: Option<mpsc::Sender<Job>>,
    thread: Option<JoinHandle<()>>,
}

impl DeviceThread {
    /// Moves `device` onto a new thread named `name`.
    pub fn spawn(name: String, device: impl BlockingDevice) -> Result<Self, DeviceError> {
        Self::spawn_pinned(name, device, None)
    }

    /// Moves `device` onto a new thread named `name`, pinned to `core` if given. A
    /// thread that cannot be pinned (the system refuses) warns and runs unpinned.
    pub fn spawn_pinned(
        name: String,
        device: impl BlockingDevice,
        core: Option<Core>,
    ) -> Result<Self, DeviceError> {
        let info = device.info();
        let (jobs, queue) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name(name.clone())
            .spawn(move || {
                if let Some(core) = core {
                    cores::pin_current(core, &name);
                }
                serve(device, queue, &name)
            })
            .map_err(|e| DeviceError::Gone(e.to_string()))?;
        Ok(Self {
            info,
            core,
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

fn serve(mut device: impl BlockingDevice, queue: mpsc::Receiver<Job>, name: &str) {
    let mut watch = Watch::new(name);
    for job in queue {
        // A reply nobody waits for any more is not an error of the device.
        match job {
            Job::Load(artifact, reply) => {
                let _ = reply.send(watch.timed(&mut device, |d| d.load(&artifact)));
            }
            Job::Unload(model, reply) => {
                let _ = reply.send(watch.timed(&mut device, |d| d.unload(model)));
            }
            Job::Infer(job, reply) => {
                let _ = reply.send(watch.timed(&mut device, |d| d.infer(&job)));
            }
        }
    }
}

/// Times a device thread's jobs and watches whether they wait for their core.
struct Watch<'a> {
    name: &'a str,
    started: Instant,
    contention: Contention,
    /// This thread's waiting counter, opened once.
    sampler: Sampler,
}

impl<'a> Watch<'a> {
    fn new(name: &'a str) -> Self {
        Self {
            name,
            started: Instant::now(),
            contention: Contention::default(),
            sampler: Sampler::for_this_thread(),
        }
    }

    /// Runs one job, timed; says when the device's jobs wait for its core.
    fn timed<T, D: BlockingDevice>(
        &mut self,
        device: &mut D,
        work: impl FnOnce(&mut D) -> Result<T, DeviceError>,
    ) -> Result<Executed<T>, DeviceError> {
        let before = self.sampler.waited();
        let begin = Instant::now();
        let done = timed(device, work);
        let wall = nanos(begin.elapsed());
        // What the kernel kept this thread waiting for a core during the job.
        let waited = self
            .sampler
            .waited()
            .zip(before)
            .map_or(0, |(after, before)| after.saturating_sub(before));
        tracing::debug!(target: "clockwork::api::trace", device = self.name,
            wall_us = wall / 1_000, waited_us = waited / 1_000, "device job");
        let now = nanos(self.started.elapsed());
        if let Some(shared) = self.contention.observe(now, wall, waited) {
            tracing::warn!(
                device = self.name,
                jobs = shared.jobs,
                waited_ms = shared.waited / 1_000_000,
                "the device waited for its core {:.0}% of its jobs' time: something else \
                 runs on its core (a client on this machine?), and its runs and learned \
                 estimates stretch with it",
                shared.share() * 100.0
            );
        }
        done
    }
}

/// Runs one job of the device, timing it.
fn timed<T, D: BlockingDevice>(
    device: &mut D,
    work: impl FnOnce(&mut D) -> Result<T, DeviceError>,
) -> Result<Executed<T>, DeviceError> {
    let begin = Instant::now();
    // A panic inside a device library (a bad graph, a bug) fails this job, not the
    // device: the thread lives on for the next one.
    let value = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work(device)))
        .unwrap_or_else(|panic| Err(DeviceError::Panicked(panic_message(&panic))))?;
    let host = nanos(begin.elapsed());
    Ok(Executed {
        value,
        device_time: Some(device.last_device_time().unwrap_or(host)),
    })
}

/// What a panic of the device's code said, as far as it can be told.
pub(super) fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    format!("the device panicked: {}", super::panics::panic_text(panic))
}

impl Backend for DeviceThread {
    fn info(&self) -> BackendInfo {
        self.info.clone()
    }

    fn core(&self) -> Option<Core> {
        self.core
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::profiles;
    use crate::tensor::Tensor;

    /// Doubles its input; remembers which thread it ran on.
    struct Doubler {
        loaded: bool,
        thread: Option<std::thread::ThreadId>,
    }

    impl BlockingDevice for Doubler {
        fn info(&self) -> BackendInfo {
            BackendInfo {
                kind: "doubler".into(),
                pages: 4,
                emulated: false,
                needs_graph: false,
            }
        }
        fn load(&mut self, _: &ModelArtifact) -> Result<(), DeviceError> {
            self.loaded = true;
            self.thread = Some(std::thread::current().id());
            Ok(())
        }
        fn unload(&mut self, _: ModelId) -> Result<(), DeviceError> {
            self.loaded = false;
            Ok(())
        }
        fn infer(&mut self, job: &InferJob) -> Result<BatchOutputs, DeviceError> {
            if !self.loaded || self.thread != Some(std::thread::current().id()) {
                return Err(DeviceError::NotLoaded(job.model));
            }
            Ok(job
                .inputs
                .iter()
                .map(|inputs| {
                    let x = inputs[0].to_f32().unwrap_or_default();
                    let y: Vec<f32> = x.iter().map(|v| v * 2.0).collect();
                    vec![Tensor::from_f32("output", vec![y.len()], &y)]
                })
                .collect())
        }
    }

    /// Panics on every INFER.
    struct Panicker;

    impl BlockingDevice for Panicker {
        fn info(&self) -> BackendInfo {
            BackendInfo {
                kind: "panicker".into(),
                pages: 1,
                emulated: false,
                needs_graph: false,
            }
        }
        fn load(&mut self, _: &ModelArtifact) -> Result<(), DeviceError> {
            Ok(())
        }
        fn unload(&mut self, _: ModelId) -> Result<(), DeviceError> {
            Ok(())
        }
        fn infer(&mut self, _: &InferJob) -> Result<BatchOutputs, DeviceError> {
            panic!("kernel exploded")
        }
    }

    /// Answers every INFER with the cores its thread may run on.
    struct WhereAmI;

    impl BlockingDevice for WhereAmI {
        fn info(&self) -> BackendInfo {
            Panicker.info()
        }
        fn load(&mut self, _: &ModelArtifact) -> Result<(), DeviceError> {
            Ok(())
        }
        fn unload(&mut self, _: ModelId) -> Result<(), DeviceError> {
            Ok(())
        }
        fn infer(&mut self, _: &InferJob) -> Result<BatchOutputs, DeviceError> {
            let ids = core_affinity::get_core_ids().unwrap_or_default();
            let ids: Vec<f32> = ids.iter().map(|c| c.id as f32).collect();
            Ok(vec![vec![Tensor::from_f32("cores", vec![ids.len()], &ids)]])
        }
    }

    #[tokio::test]
    async fn a_pinned_device_runs_on_its_core_alone() {
        let machine = cores::Machine::detect();
        if !machine.pinnable {
            return; // nothing to check where the system cannot pin
        }
        let last = *machine.cores.last().unwrap();
        let job = InferJob {
            model: ModelId(0),
            inputs: vec![],
        };
        let pinned = DeviceThread::spawn_pinned("pinned".into(), WhereAmI, Some(last)).unwrap();
        let seen = pinned.infer(job.clone()).await.unwrap().value;
        assert_eq!(seen[0][0].to_f32().unwrap(), vec![last.0 as f32]);
        // Unpinned, a device thread keeps the whole mask it was started with.
        let free = DeviceThread::spawn("free".into(), WhereAmI).unwrap();
        let seen = free.infer(job).await.unwrap().value;
        assert_eq!(seen[0][0].to_f32().unwrap().len(), machine.cores.len());
    }

    #[tokio::test]
    async fn a_panic_fails_the_job_and_the_device_lives_on() {
        let backend = DeviceThread::spawn("panicker".into(), Panicker).unwrap();
        let job = InferJob {
            model: ModelId(0),
            inputs: vec![],
        };
        for _ in 0..2 {
            let failed = backend.infer(job.clone()).await.unwrap_err();
            assert!(failed.to_string().contains("kernel exploded"), "{failed}");
        }
        assert!(backend.unload(ModelId(0)).await.is_ok());
    }

    #[tokio::test]
    async fn runs_jobs_on_its_own_thread_in_order() {
        let device = Doubler {
            loaded: false,
            thread: None,
        };
        let backend = DeviceThread::spawn("doubler".into(), device).unwrap();
        let artifact = Arc::new(ModelArtifact {
            id: ModelId(0),
            spec: profiles::model("mlp-small", "m", 1).unwrap(),
            bytes: None,
            prepared: Default::default(),
        });
        let job = InferJob {
            model: ModelId(0),
            inputs: vec![Arc::new(vec![Tensor::from_f32(
                "input",
                vec![2],
                &[1.5, -2.0],
            )])],
        };
        // Submitted back to back: the load runs before the infer.
        let load = backend.load(artifact);
        let infer = backend.infer(job.clone());
        load.await.unwrap();
        let done = infer.await.unwrap();
        assert_eq!(done.value[0][0].to_f32().unwrap(), vec![3.0, -4.0]);
        assert!(
            done.device_time.is_some(),
            "host-timed on the device thread"
        );
        backend.unload(ModelId(0)).await.unwrap();
        assert!(matches!(
            backend.infer(job).await,
            Err(DeviceError::NotLoaded(_))
        ));
    }
}
