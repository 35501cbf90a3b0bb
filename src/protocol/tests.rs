//! The protocol's messages survive the wire: random actions, reports and tensors encoded
//! with bincode and decoded again are equal to what was sent.

use std::sync::Arc;

use proptest::prelude::*;

use super::*;
use crate::model::DataType;

fn datatype() -> impl Strategy<Value = DataType> {
    use DataType::*;
    prop::sample::select(vec![
        Bool, Uint8, Uint16, Uint32, Uint64, Int8, Int16, Int32, Int64, Fp16, Fp32, Fp64, Bytes,
    ])
}

fn tensor() -> impl Strategy<Value = Tensor> {
    let shape = prop::collection::vec(0usize..5_000_000, 0..4);
    let data = prop::collection::vec(any::<u8>(), 0..64);
    ("[a-z_0-9]{0,12}", datatype(), shape, data).prop_map(|(name, datatype, shape, data)| Tensor {
        name,
        datatype,
        shape,
        data: data.into(),
    })
}

fn items() -> impl Strategy<Value = Vec<Vec<Tensor>>> {
    prop::collection::vec(prop::collection::vec(tensor(), 0..3), 0..4)
}

fn kind() -> impl Strategy<Value = ActionKind> {
    prop_oneof![
        Just(ActionKind::Load),
        Just(ActionKind::Unload),
        prop::collection::vec(any::<u64>().prop_map(RequestId), 0..20)
            .prop_map(|requests| ActionKind::Infer { requests }),
    ]
}

fn action() -> impl Strategy<Value = Action> {
    let ids = (any::<u64>(), any::<u32>(), any::<u32>());
    let times = (any::<u64>(), any::<u64>(), any::<u64>());
    (ids, times, kind()).prop_map(
        |((id, device, model), (earliest, latest, expected), kind)| Action {
            id: ActionId(id),
            device: DeviceId(device),
            model: ModelId(model),
            earliest,
            latest,
            expected_duration: expected,
            kind,
        },
    )
}

fn error() -> impl Strategy<Value = ActionError> {
    prop_oneof![
        Just(ActionError::TooLate),
        Just(ActionError::NotResident),
        Just(ActionError::NoFreePages),
        Just(ActionError::AlreadyResident),
        ".{0,40}".prop_map(ActionError::Device),
        ".{0,40}".prop_map(ActionError::Crashed),
        ".{0,40}".prop_map(ActionError::Model),
        Just(ActionError::Overdue),
    ]
}

fn result() -> impl Strategy<Value = Result<Measured, ActionError>> {
    let measured =
        (any::<u64>(), any::<u64>(), any::<u64>()).prop_map(|(begin, end, duration)| Measured {
            begin,
            end,
            duration,
        });
    prop_oneof![measured.prop_map(Ok), error().prop_map(Err)]
}

fn report() -> impl Strategy<Value = ActionReport> {
    let outputs = prop::option::of(items());
    (any::<u64>(), any::<u32>(), result(), outputs).prop_map(|(action, device, result, outputs)| {
        ActionReport {
            action: ActionId(action),
            device: DeviceId(device),
            result,
            outputs,
        }
    })
}

fn execute() -> impl Strategy<Value = Execute> {
    (action(), items()).prop_map(|(action, items)| Execute {
        action,
        inputs: items.into_iter().map(Arc::new).collect(),
    })
}

proptest! {
    #[test]
    fn execute_round_trips(message in execute()) {
        let bytes = encode(&message).unwrap();
        prop_assert_eq!(decode::<Execute>(&bytes).unwrap(), message);
    }

    #[test]
    fn report_round_trips(message in report()) {
        let bytes = encode(&message).unwrap();
        prop_assert_eq!(decode::<ActionReport>(&bytes).unwrap(), message);
    }

    /// A message cut short is an error, never a panic or a wrong message.
    #[test]
    fn truncated_messages_are_refused(message in report(), cut in any::<prop::sample::Index>()) {
        let bytes = encode(&message).unwrap();
        let cut = cut.index(bytes.len());
        prop_assert!(decode::<ActionReport>(&bytes[..cut]).is_err());
    }
}

#[test]
fn tensor_data_travels_as_one_run_of_bytes() {
    let data: Vec<u8> = (0..=255).collect();
    let t = Tensor {
        name: "x".into(),
        datatype: DataType::Uint8,
        shape: vec![256],
        data: data.clone().into(),
    };
    let bytes = encode(&t).unwrap();
    let at = bytes.windows(data.len()).position(|w| w == data.as_slice());
    assert!(at.is_some(), "the data is written verbatim");
    assert!(bytes.len() < data.len() + 16, "{} bytes", bytes.len());
    assert_eq!(decode::<Tensor>(&bytes).unwrap(), t);
}

#[test]
fn trailing_bytes_are_refused() {
    let mut bytes = encode(&ActionKind::Load).unwrap();
    bytes.push(0);
    assert!(matches!(
        decode::<ActionKind>(&bytes),
        Err(WireError::Trailing(1))
    ));
}
