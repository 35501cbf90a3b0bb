//! Triton's model configuration as the `ModelConfig` message, read from the JSON form the
//! HTTP route answers (`models::configuration`, one place that says what a model's or a
//! pipeline's configuration is): this module only changes its encoding.

use std::collections::HashMap;

use serde_json::Value;

use super::proto::model_config::SchedulingChoice;
use super::proto::model_ensembling::Step;
use super::proto::{
    DataType, ModelConfig, ModelDynamicBatching, ModelEnsembling, ModelInput, ModelOutput,
    ModelParameter,
};

fn text(v: &Value, key: &str) -> String {
    v.get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

fn int(v: &Value, key: &str) -> i64 {
    v.get(key).and_then(Value::as_i64).unwrap_or_default()
}

fn list<'a>(v: &'a Value, key: &str) -> impl Iterator<Item = &'a Value> {
    v.get(key).and_then(Value::as_array).into_iter().flatten()
}

fn dims(v: &Value) -> Vec<i64> {
    list(v, "dims").filter_map(Value::as_i64).collect()
}

/// A `TYPE_...` name as the enum (`TYPE_INVALID` for a name it does not know).
fn data_type(v: &Value) -> i32 {
    let name = text(v, "data_type");
    DataType::from_str_name(&name).unwrap_or(DataType::TypeInvalid) as i32
}

fn strings(v: &Value, key: &str) -> HashMap<String, String> {
    let map = v.get(key).and_then(Value::as_object).into_iter().flatten();
    map.filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
        .collect()
}

fn scheduling(config: &Value) -> Option<SchedulingChoice> {
    if let Some(ensemble) = config.get("ensemble_scheduling") {
        let step = list(ensemble, "step").map(|s| Step {
            model_name: text(s, "model_name"),
            model_version: int(s, "model_version"),
            input_map: strings(s, "input_map"),
            output_map: strings(s, "output_map"),
        });
        let step = step.collect();
        return Some(SchedulingChoice::EnsembleScheduling(ModelEnsembling {
            step,
        }));
    }
    let batching = config.get("dynamic_batching")?;
    let sizes = list(batching, "preferred_batch_size").filter_map(Value::as_i64);
    Some(SchedulingChoice::DynamicBatching(ModelDynamicBatching {
        preferred_batch_size: sizes.filter_map(|b| i32::try_from(b).ok()).collect(),
    }))
}

/// The message of a configuration in its JSON form.
pub fn from_json(config: &Value) -> ModelConfig {
    let parameters = config.get("parameters").and_then(Value::as_object);
    let parameters = parameters.into_iter().flatten().map(|(k, v)| {
        let string_value = text(v, "string_value");
        (k.clone(), ModelParameter { string_value })
    });
    ModelConfig {
        name: text(config, "name"),
        platform: text(config, "platform"),
        backend: text(config, "backend"),
        max_batch_size: i32::try_from(int(config, "max_batch_size")).unwrap_or_default(),
        input: list(config, "input")
            .map(|t| ModelInput {
                name: text(t, "name"),
                data_type: data_type(t),
                dims: dims(t),
            })
            .collect(),
        output: list(config, "output")
            .map(|t| ModelOutput {
                name: text(t, "name"),
                data_type: data_type(t),
                dims: dims(t),
            })
            .collect(),
        scheduling_choice: scheduling(config),
        parameters: parameters.collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_field_of_the_json_form_arrives() {
        let config = json!({
            "name": "m", "platform": "clockwork", "backend": "clockwork", "max_batch_size": 1,
            "input": [{"name": "x", "data_type": "TYPE_FP32", "dims": [3, 4]}],
            "output": [{"name": "y", "data_type": "TYPE_STRING", "dims": [-1]}],
            "dynamic_batching": {"preferred_batch_size": [1, 2, 4]},
            "parameters": {"slo_ms": {"string_value": "100"}},
        });
        let m = from_json(&config);
        assert_eq!((m.name.as_str(), m.max_batch_size), ("m", 1));
        assert_eq!(m.input[0].data_type, DataType::TypeFp32 as i32);
        assert_eq!(m.input[0].dims, vec![3, 4]);
        assert_eq!(m.output[0].data_type, DataType::TypeString as i32);
        assert_eq!(m.parameters["slo_ms"].string_value, "100");
        let Some(SchedulingChoice::DynamicBatching(b)) = m.scheduling_choice else {
            panic!("no dynamic batching");
        };
        assert_eq!(b.preferred_batch_size, vec![1, 2, 4]);
        let ensemble = json!({"ensemble_scheduling": {"step": [
            {"model_name": "a", "model_version": 1, "input_map": {"i": "x"}, "output_map": {}}
        ]}});
        let Some(SchedulingChoice::EnsembleScheduling(e)) = from_json(&ensemble).scheduling_choice
        else {
            panic!("no ensemble");
        };
        assert_eq!(e.step[0].input_map["i"], "x");
    }
}
