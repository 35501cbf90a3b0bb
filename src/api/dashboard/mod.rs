//! `GET /dashboard`: a live timeline of every device, served by clockwork itself.
//!
//! The page (`page.html`, `page.js`, `page.css`, embedded at build time: no build step,
//! nothing fetched from elsewhere) draws one row per device with its exec and load lanes,
//! each action a bar (planned when sent, then measured), the "now" line, late answers and
//! refusals as marks, and beside it the busiest models' queues, goodput and estimates.
//!
//! Its data comes from `GET /dashboard/events`, server-sent events. Each client gets a
//! task of its own that subscribes to the runtime's events (a subscriber that falls behind
//! loses old events, it never slows the controller) and folds them in a [`Coalescer`];
//! at most ten times a second the coalescer hands over one bounded frame, and only when
//! the client's connection has taken the previous one (a queue of one frame): a slow
//! browser gets fewer, fuller frames and never holds anything but its own task. The
//! snapshot beside the timeline (`board.rs`) is built once a second by one shared task,
//! from the metrics' counts (the numbers `/metrics` shows), the policy's views and the
//! controller's mirror of the devices.
//!
//! These routes are a page for people, not part of the inference API: they are mounted
//! beside it and left out of the OpenAPI document.

mod board;
mod frame;

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use actix::Addr;
use actix_web::body::{BodySize, MessageBody};
use actix_web::http::header;
use actix_web::web::{self, Bytes};
use actix_web::{get, HttpResponse};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::{mpsc, watch};
use tokio::time::{interval, MissedTickBehavior};

use super::{ApiState, Metrics};
use crate::actors::admission::AdmissionTable;
use crate::actors::messages::SnapshotController;
use crate::actors::{Controller, Runtime};
use crate::events::EventBus;
use crate::model::ModelId;
use crate::time::Clock;
pub use board::{Answers, ModelRow, Snapshot};
pub use frame::{Bar, Coalescer, Frame, Lane, Limits, Mark};

const PAGE: &str = include_str!("page.html");
const SCRIPT: &str = include_str!("page.js");
const STYLE: &str = include_str!("page.css");

/// How often the shared snapshot is rebuilt.
const REFRESH: Duration = Duration::from_secs(1);

/// Frames a client's connection may hold unsent: one, so that a slow browser's frames
/// wait in its coalescer (bounded, coalesced) rather than pile up.
const QUEUED_FRAMES: usize = 1;

/// What the dashboard's routes share.
#[derive(Clone)]
pub struct Dashboard {
    /// The latest snapshot (the shared task replaces it every second).
    snapshots: watch::Receiver<Arc<Snapshot>>,
    events: EventBus,
    clock: Clock,
    limits: Limits,
}

impl Dashboard {
    /// Starts the task that rebuilds the snapshot every second; it must be called inside
    /// the actix system that serves, and the task ends with it.
    pub fn start(runtime: &Runtime, metrics: Arc<Metrics>) -> Self {
        let (sender, snapshots) = watch::channel(Arc::new(Snapshot::default()));
        let controller = runtime.controller.clone();
        let admission = Arc::clone(&runtime.admission);
        actix_web::rt::spawn(refresh(controller, admission, metrics, sender));
        Self {
            snapshots,
            events: runtime.events.clone(),
            clock: runtime.clock,
            limits: Limits::default(),
        }
    }

    /// Starts a client's task: events in, at most one frame waiting in `frames`. It ends
    /// when the client goes away (its receiver is dropped) or the server drains.
    fn follow(&self, frames: mpsc::Sender<Bytes>) {
        let mut events = self.events.subscribe();
        let mut snapshots = self.snapshots.clone();
        let clock = self.clock;
        let mut coalescer = Coalescer::new(self.limits);
        coalescer.snapshot(Arc::clone(&snapshots.borrow_and_update()));
        let mut tick = interval(Duration::from_nanos(self.limits.interval));
        tick.set_missed_tick_behavior(MissedTickBehavior::Skip);
        actix_web::rt::spawn(async move {
            loop {
                tokio::select! {
                    event = events.recv() => match event {
                        Ok(event) => coalescer.push(&event),
                        Err(RecvError::Lagged(lost)) => coalescer.lost(lost),
                        Err(RecvError::Closed) => break,
                    },
                    changed = snapshots.changed() => match changed {
                        Ok(()) => coalescer.snapshot(Arc::clone(&snapshots.borrow_and_update())),
                        // The server is draining: end the stream, so that its connection
                        // does not hold the graceful stop back.
                        Err(_) => break,
                    },
                    _ = tick.tick() => {
                        match frames.try_reserve() {
                            Ok(permit) => {
                                if let Some(frame) = coalescer.take(clock.now()) {
                                    permit.send(encode(&frame));
                                }
                            }
                            // The browser has not taken the last frame: keep coalescing.
                            Err(TrySendError::Full(())) => {}
                            Err(TrySendError::Closed(())) => break,
                        }
                    }
                }
            }
        });
    }
}

/// Rebuilds the snapshot every [`REFRESH`] until the controller drains or stops.
async fn refresh(
    controller: Addr<Controller>,
    admission: Arc<AdmissionTable>,
    metrics: Arc<Metrics>,
    sender: watch::Sender<Arc<Snapshot>>,
) {
    let mut history = board::History::default();
    let mut tick = interval(REFRESH);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Ok(state) = controller.send(SnapshotController).await else {
            break;
        };
        if state.draining {
            // Dropping the sender ends every client's stream.
            break;
        }
        let counts = metrics.answers();
        let views = (0..counts.len())
            .map(|i| admission.get(ModelId(i as u32)))
            .collect();
        let inputs = board::Inputs {
            now: state.now,
            counts,
            views,
            devices: state.policy.devices,
            queued: state.policy.queued,
        };
        sender.send_replace(Arc::new(board::snapshot(&mut history, inputs)));
    }
}

/// One server-sent event holding the frame as JSON.
fn encode(frame: &Frame) -> Bytes {
    match serde_json::to_string(frame) {
        Ok(json) => Bytes::from(format!("data: {json}\n\n")),
        // Cannot happen for these types; a comment line keeps the stream valid.
        Err(e) => Bytes::from(format!(": frame not encoded: {e}\n\n")),
    }
}

/// The body of an event stream: the frames of one client's task, as they come.
struct Frames(mpsc::Receiver<Bytes>);

impl MessageBody for Frames {
    type Error = Infallible;

    fn size(&self) -> BodySize {
        BodySize::Stream
    }

    fn poll_next(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Bytes, Self::Error>>> {
        self.0.poll_recv(cx).map(|frame| frame.map(Ok))
    }
}

/// Mounts the page, its script and style, and the event stream.
pub fn routes(config: &mut web::ServiceConfig) {
    config
        .service(page)
        .service(script)
        .service(style)
        .service(stream);
}

fn text(content_type: &'static str, body: &'static str) -> HttpResponse {
    HttpResponse::Ok()
        .content_type(content_type)
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .body(body)
}

#[get("/dashboard")]
async fn page() -> HttpResponse {
    text("text/html; charset=utf-8", PAGE)
}

#[get("/dashboard/page.js")]
async fn script() -> HttpResponse {
    text("text/javascript; charset=utf-8", SCRIPT)
}

#[get("/dashboard/page.css")]
async fn style() -> HttpResponse {
    text("text/css; charset=utf-8", STYLE)
}

/// The frames, as server-sent events (`data: {frame as JSON}`).
#[get("/dashboard/events")]
async fn stream(state: web::Data<ApiState>) -> HttpResponse {
    let (sender, receiver) = mpsc::channel(QUEUED_FRAMES);
    state.dashboard.follow(sender);
    HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .body(Frames(receiver))
}
