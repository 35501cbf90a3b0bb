//! Frames survive the wire (random envelopes through the real codec), and a frame too
//! long, a wrong version, magic or token are refused.

use bytes::BytesMut;
use proptest::prelude::*;
use tokio_util::codec::{Decoder, Encoder};

use super::*;
use crate::model::{ActionId, DataType, DeviceId, RequestId};
use crate::protocol::{Action, ActionError, ActionKind, Measured};
use crate::tensor::Tensor;

fn tensor() -> impl Strategy<Value = Tensor> {
    let shape = prop::collection::vec(0usize..1000, 0..3);
    let data = prop::collection::vec(any::<u8>(), 0..48);
    ("[a-z]{0,6}", shape, data).prop_map(|(name, shape, data)| Tensor {
        name,
        datatype: DataType::Fp32,
        shape,
        data: data.into(),
    })
}

fn execute() -> impl Strategy<Value = Execute> {
    let items = prop::collection::vec(prop::collection::vec(tensor(), 0..3), 0..4);
    (any::<u64>(), any::<u64>(), any::<u64>(), items).prop_map(|(id, earliest, latest, items)| {
        Execute {
            action: Action {
                id: ActionId(id),
                device: DeviceId(1),
                model: ModelId(2),
                earliest,
                latest,
                expected_duration: earliest / 3,
                kind: ActionKind::Infer {
                    requests: (0..items.len() as u64).map(RequestId).collect(),
                },
            },
            inputs: items.into_iter().map(std::sync::Arc::new).collect(),
        }
    })
}

fn report() -> impl Strategy<Value = ActionReport> {
    let outputs = prop::option::of(prop::collection::vec(
        prop::collection::vec(tensor(), 0..2),
        0..3,
    ));
    (any::<u64>(), any::<bool>(), outputs).prop_map(|(t, ok, outputs)| ActionReport {
        action: ActionId(t),
        device: DeviceId(0),
        result: if ok {
            Ok(Measured {
                begin: t / 2,
                end: t,
                duration: t / 2,
            })
        } else {
            Err(ActionError::Device(format!("failed at {t}")))
        },
        outputs,
    })
}

fn hello() -> impl Strategy<Value = Hello> {
    let device =
        ("[a-z0-9-]{1,10}", any::<u32>(), any::<bool>()).prop_map(|(kind, pages, e)| DeviceDecl {
            kind,
            backend: if e {
                BackendKind::Sim
            } else {
                BackendKind::Cpu
            },
            pages,
            page_bytes: 1 << 20,
            emulated: e,
            needs_graph: !e,
        });
    let devices = prop::collection::vec(device, 0..4);
    ("[a-z0-9.-]{0,20}", devices, prop::option::of("[ -~]{0,16}")).prop_map(
        |(name, devices, token)| Hello {
            magic: MAGIC,
            version: VERSION,
            name,
            devices,
            token,
        },
    )
}

fn body() -> impl Strategy<Value = Body> {
    let model = prop::option::of(prop::collection::vec(any::<u8>(), 0..64)).prop_map(|bytes| {
        Body::Model(ModelBytes {
            id: ModelId(3),
            spec: crate::gpu::profiles::model(crate::gpu::profiles::MODELS[0], "m", 1)
                .expect("a built-in profile"),
            bytes,
        })
    });
    prop_oneof![
        hello().prop_map(Body::Hello),
        Just(Body::Accept),
        "[ -~]{0,30}".prop_map(Body::Refuse),
        execute().prop_map(Body::Execute),
        report().prop_map(Body::Report),
        model,
        Just(Body::Ping),
        Just(Body::Pong),
    ]
}

/// Encodes through the codec as the sender does and decodes as the reader does.
fn through_the_wire(envelope: &Envelope, max: usize) -> Result<Envelope, String> {
    let mut wire = BytesMut::new();
    let bytes = encode(envelope).map_err(|e| e.to_string())?;
    let mut sender = codec_with_max(usize::MAX >> 1);
    Encoder::<bytes::Bytes>::encode(&mut sender, bytes.into(), &mut wire)
        .map_err(|e| e.to_string())?;
    let frame = codec_with_max(max)
        .decode(&mut wire)
        .map_err(|e| e.to_string())?
        .ok_or("incomplete frame")?;
    decode(&frame).map_err(|e| e.to_string())
}

proptest! {
    #[test]
    fn envelopes_round_trip(sent in any::<u64>(), min in prop::option::of(any::<i64>()), body in body()) {
        let envelope = Envelope { sent, min_delta: min, body };
        prop_assert_eq!(through_the_wire(&envelope, MAX_FRAME_BYTES), Ok(envelope));
    }
}

#[test]
fn an_oversized_frame_is_refused() {
    let envelope = Envelope {
        sent: 1,
        min_delta: None,
        body: Body::Refuse("x".repeat(2_000)),
    };
    let error = through_the_wire(&envelope, 1_000).unwrap_err();
    assert!(error.contains("frame size too big"), "{error}");
    assert!(through_the_wire(&envelope, 4_000).is_ok());
}

#[test]
fn a_wrong_version_magic_or_token_is_refused_with_the_reason() {
    let good = Hello {
        magic: MAGIC,
        version: VERSION,
        name: "w".into(),
        devices: Vec::new(),
        token: Some("secret".into()),
    };
    assert_eq!(check_hello(&good, Some("secret"), 1 << 20), Ok(()));
    assert_eq!(check_hello(&good, None, 1 << 20), Ok(()));
    let old = Hello {
        version: VERSION + 1,
        ..good.clone()
    };
    let why = check_hello(&old, None, 1 << 20).unwrap_err();
    assert!(why.contains(&format!("version {}", VERSION + 1)), "{why}");
    let stranger = Hello {
        magic: *b"HTTP/1.1",
        ..good.clone()
    };
    assert!(check_hello(&stranger, None, 1)
        .unwrap_err()
        .contains("magic"));
    for token in [None, Some("secreT"), Some("secret2"), Some("")] {
        let hello = Hello {
            token: token.map(String::from),
            ..good.clone()
        };
        let why = check_hello(&hello, Some("secret"), 1 << 20).unwrap_err();
        assert!(why.contains("token"), "{why}");
    }
}

#[test]
fn secrets_compare_by_every_byte() {
    assert!(same_secret(b"abc", b"abc"));
    assert!(!same_secret(b"abc", b"abd"));
    assert!(!same_secret(b"abc", b"ab"));
    assert!(!same_secret(b"", b"a"));
    assert!(same_secret(b"", b""));
}
