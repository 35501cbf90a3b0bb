//! What crosses between a controller and a worker: the frames, their framing and their
//! encoding.
//!
//! Every frame is an [`Envelope`]: the sender's clock reading when it sent it, the sender's
//! current minimum one-way delta (see `super::clock`) and a [`Body`]. On the socket each
//! frame is a 4-byte big-endian length and that many bytes of bincode 2 (the executor
//! protocol's `encode`/`decode`, plain serde: no flattened or untagged types, which bincode
//! cannot read back). Tensors travel as raw bytes; the inputs of a batch travel in the one
//! `Execute` frame, its outputs in the one `Report` frame.

use serde::{Deserialize, Serialize};
use tokio_util::codec::LengthDelimitedCodec;

use crate::config::BackendKind;
use crate::model::{ModelId, ModelSpec};
use crate::protocol::{ActionReport, Execute, WireError};
use crate::time::Nanos;

/// The first field of a hello: a peer that does not send it speaks another protocol.
pub const MAGIC: [u8; 8] = *b"clkwork\0";

/// The protocol version; a worker of another version is refused with both numbers.
/// 2: reports may carry `ActionError::Model` (the variants after it renumbered).
pub const VERSION: u32 = 2;

/// The most bytes a frame may hold, either way. Sized for the largest batch of inputs: a
/// batch of up to `policy.max_batch` (default 16) requests, each read from an HTTP body of
/// at most `server.max_body_bytes` (default 32 MiB), with their tensors as raw bytes, is at
/// most 512 MiB; a model's ONNX bytes must fit too. A longer length prefix is refused
/// before anything is allocated.
pub const MAX_FRAME_BYTES: usize = 512 << 20;

/// The length-delimited codec of both sides, with the maximum frame size.
pub fn codec() -> LengthDelimitedCodec {
    codec_with_max(MAX_FRAME_BYTES)
}

/// The codec with another maximum (tests send oversized frames to a small one).
pub fn codec_with_max(max: usize) -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .length_field_length(4)
        .max_frame_length(max)
        .new_codec()
}

/// One frame.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    /// The sender's clock when it sent the frame.
    pub sent: Nanos,
    /// The sender's minimum of `receive - send` over its last frames (`None` before it has
    /// received one): the peer needs it for the offset and the round trip.
    pub min_delta: Option<i64>,
    /// What the frame says.
    pub body: Body,
}

/// What a frame says.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Body {
    /// Worker to controller, first: who it is and what devices it brings.
    Hello(Hello),
    /// Controller to worker: joined.
    Accept,
    /// Controller to worker: not joined, and why (the connection closes after it).
    Refuse(String),
    /// Controller to worker: an action for one of its devices (`action.device` is the
    /// worker's own index of the device), with its inputs; times on the controller's clock.
    Execute(Execute),
    /// Worker to controller: an action's report (`device` the worker's index); times
    /// already translated to the controller's clock.
    Report(ActionReport),
    /// Controller to worker, before the worker's first LOAD of a model: the model.
    Model(ModelBytes),
    /// Either way, when idle: asks for a `Pong` (any frame is a heartbeat).
    Ping,
    /// The answer to a `Ping`.
    Pong,
}

/// A worker's introduction.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Hello {
    /// [`MAGIC`].
    pub magic: [u8; 8],
    /// [`VERSION`] of the worker's build.
    pub version: u32,
    /// The worker's name (its host name by default), in logs and metric labels.
    pub name: String,
    /// Its devices, in its own order (the index is the device's id on the worker).
    pub devices: Vec<DeviceDecl>,
    /// The cluster's shared token, if the worker has one.
    pub token: Option<String>,
}

/// One device of a worker, as the controller's policy and registration need it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeviceDecl {
    /// Its kind (estimates are per kind).
    pub kind: String,
    /// Its configured backend (models' `backends` lists name it).
    pub backend: BackendKind,
    /// Weight pages.
    pub pages: u32,
    /// Bytes per page on the worker: must match the controller's, which sizes models.
    pub page_bytes: u64,
    /// It answers made-up outputs.
    pub emulated: bool,
    /// It needs a model's graph.
    pub needs_graph: bool,
}

/// A model as the worker's model cache needs it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelBytes {
    /// The controller's id of the model (LOADs name it).
    pub id: ModelId,
    pub spec: ModelSpec,
    /// Its ONNX graph, if it has one.
    #[serde(with = "serde_bytes")]
    pub bytes: Option<Vec<u8>>,
}

/// Encodes a frame's bytes (without the length prefix, which the codec adds).
pub fn encode(envelope: &Envelope) -> Result<Vec<u8>, WireError> {
    crate::protocol::encode(envelope)
}

/// Decodes one frame's bytes.
pub fn decode(bytes: &[u8]) -> Result<Envelope, WireError> {
    crate::protocol::decode(bytes)
}

/// Why a hello is refused, if it is: wrong magic, version or token.
pub fn check_hello(hello: &Hello, token: Option<&str>, page_bytes: u64) -> Result<(), String> {
    if hello.magic != MAGIC {
        return Err("not a clockwork worker (wrong magic)".into());
    }
    if hello.version != VERSION {
        return Err(format!(
            "protocol version {} is not the controller's {VERSION}",
            hello.version
        ));
    }
    if let Some(expected) = token {
        let given = hello.token.as_deref().unwrap_or("");
        if !same_secret(expected.as_bytes(), given.as_bytes()) {
            return Err("wrong or missing cluster token".into());
        }
    }
    if let Some(d) = hello.devices.iter().find(|d| d.page_bytes != page_bytes) {
        return Err(format!(
            "device pages of {} bytes, the controller's are {page_bytes}",
            d.page_bytes
        ));
    }
    Ok(())
}

/// Compares two secrets in time that depends only on their lengths, not on where they
/// first differ (a timing side channel would reveal a token byte by byte).
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    let mut diff = u8::from(a.len() != b.len());
    for (i, &x) in a.iter().enumerate() {
        diff |= x ^ b.get(i).copied().unwrap_or(!x);
    }
    diff == 0
}

#[cfg(test)]
mod tests;
