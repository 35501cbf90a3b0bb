//! Fuzzing the executor protocol's decoder (`src/protocol/`: bincode 2 with a size limit):
//! arbitrary bytes, and valid `Execute` and `ActionReport` frames truncated, extended and
//! mutated, decode to a message or a `WireError`, never a panic, and never allocate out of
//! proportion to the frame (a hostile length prefix must not reserve gigabytes).

mod fuzz_support;

use std::sync::Arc;

use clockwork::model::{ActionId, DataType, DeviceId, ModelId, RequestId};
use clockwork::protocol::{
    decode, encode, Action, ActionError, ActionKind, ActionReport, Execute, Measured,
};
use clockwork::tensor::Tensor;
use fuzz_support::{apply, config, edits, largest_allocation, ALLOCATION_LIMIT};
use proptest::prelude::*;

fn tensor(name: &str, datatype: DataType, shape: Vec<usize>, data: &[u8]) -> Tensor {
    Tensor {
        name: name.into(),
        datatype,
        shape,
        data: data.into(),
    }
}

fn action(kind: ActionKind) -> Action {
    Action {
        id: ActionId(7),
        device: DeviceId(1),
        model: ModelId(3),
        earliest: 1_000,
        latest: 2_000_000,
        expected_duration: 5_000_000,
        kind,
    }
}

/// Valid frames of each message.
fn frames() -> Vec<Vec<u8>> {
    let items = vec![
        Arc::new(vec![tensor("x", DataType::Fp32, vec![2, 2], &[0; 16])]),
        Arc::new(vec![tensor(
            "s",
            DataType::Bytes,
            vec![1],
            &[1, 0, 0, 0, b'a'],
        )]),
    ];
    let infer = Execute {
        action: action(ActionKind::Infer {
            requests: vec![RequestId(1), RequestId(2)],
        }),
        inputs: items,
    };
    let load = Execute {
        action: action(ActionKind::Load),
        inputs: Vec::new(),
    };
    let done = ActionReport {
        action: ActionId(7),
        device: DeviceId(1),
        result: Ok(Measured {
            begin: 1,
            end: 2,
            duration: 1,
        }),
        outputs: Some(vec![vec![tensor("y", DataType::Int64, vec![1], &[9; 8])]]),
    };
    let failed = ActionReport {
        action: ActionId(8),
        device: DeviceId(0),
        result: Err(ActionError::Device("boom".into())),
        outputs: None,
    };
    vec![
        encode(&infer).expect("encode"),
        encode(&load).expect("encode"),
        encode(&done).expect("encode"),
        encode(&failed).expect("encode"),
    ]
}

/// Decodes `bytes` as each message; checks the allocation bound.
fn decode_all(bytes: &[u8]) {
    let (_, largest) = largest_allocation(|| {
        let _ = decode::<Execute>(bytes);
        let _ = decode::<ActionReport>(bytes);
        let _ = decode::<Action>(bytes);
    });
    assert!(
        largest <= ALLOCATION_LIMIT.max(bytes.len() * 16),
        "{largest} bytes allocated for a frame of {}",
        bytes.len()
    );
}

#[test]
fn valid_frames_decode() {
    for frame in frames() {
        assert!(decode::<Execute>(&frame).is_ok() || decode::<ActionReport>(&frame).is_ok());
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn arbitrary_bytes_are_refused_or_decoded(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        decode_all(&bytes);
    }

    #[test]
    fn mutated_frames_are_refused_or_decoded(frame in 0usize..4, edits in edits(6)) {
        let frames = frames();
        decode_all(&apply(&frames[frame], &edits));
    }

    #[test]
    fn truncated_frames_are_refused(frame in 0usize..4, cut in any::<usize>()) {
        let frames = frames();
        let frame = &frames[frame];
        let cut = cut % frame.len();
        prop_assert!(decode::<Execute>(&frame[..cut]).is_err());
        prop_assert!(decode::<ActionReport>(&frame[..cut]).is_err());
    }
}

/// A frame claiming a vector of 2^40 tensors (a varint length prefix) is refused without
/// reserving room for them.
#[test]
fn a_huge_length_prefix_is_refused_without_allocating() {
    let mut frame = encode(&action(ActionKind::Load)).expect("encode");
    // bincode's varint: 253 then a u64 little-endian.
    frame.push(253);
    frame.extend_from_slice(&(1u64 << 40).to_le_bytes());
    frame.extend_from_slice(&[0; 32]);
    decode_all(&frame);
    assert!(decode::<Execute>(&frame).is_err());
}

/// Found by `bench/fuzz.sh` (1,000,000 cases, after 109,754 passed): 14 bytes whose length
/// prefix made the decoder allocate about 512 MB before finding the bytes missing, when
/// its limit was the protocol's whole 1 GiB. The limit now follows the frame's size.
#[test]
fn a_short_frame_claiming_half_a_gigabyte_is_refused_without_allocating_it() {
    decode_all(&[0, 0, 0, 0, 0, 0, 0, 1, 1, 252, 0, 0, 0, 2]);
}
