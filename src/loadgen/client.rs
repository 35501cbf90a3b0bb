//! One HTTP inference, as the load generator sends it and times it.
//!
//! Requests are prepared once per model (binary tensor extension, zero-filled inputs of
//! the model's shapes, binary outputs), so sending costs one copy of a shared buffer.

use std::time::Duration;

use awc::http::header::CONTENT_TYPE;
use awc::Client;
use serde_json::{json, Value};

use actix_web::web::Bytes;

use crate::api::HEADER_LENGTH;
use crate::model::DataType;
use crate::outcome::Outcome;
use crate::report::Answered;
use crate::time::Nanos;

/// Why the load generator could not talk to the server at all.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("{url}: {message}")]
    Http { url: String, message: String },
    #[error("{url}: unexpected answer: {message}")]
    Answer { url: String, message: String },
}

/// A model's ready-made inference request.
#[derive(Clone, Debug)]
pub struct Prepared {
    pub model: String,
    pub url: String,
    /// The JSON header's inputs, for requests that need their own header.
    inputs: Value,
    /// The binary input data after the header.
    data: Vec<u8>,
    /// The whole body without request parameters but `binary_data_output`.
    header_length: usize,
    body: Bytes,
}

impl Prepared {
    /// Header length and body, with `slo` as the request's `slo_ms` if given.
    fn body(&self, slo: Option<Nanos>) -> (usize, Bytes) {
        let Some(slo) = slo else {
            return (self.header_length, self.body.clone());
        };
        let header = json!({"inputs": self.inputs, "parameters":
            {"binary_data_output": true, "slo_ms": slo as f64 / 1e6}});
        let mut body = header.to_string().into_bytes();
        let length = body.len();
        body.extend_from_slice(&self.data);
        (length, body.into())
    }
}

/// Label of an answer the client could not read at all (connection, timeout, body).
pub const NO_ANSWER: &str = "http_error";

/// How one request ended, as the client saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Sent {
    /// The server answered: a success (in time or late) or a documented `error_type`.
    Answered(Outcome),
    /// An error answer whose `error_type` this build does not know, named as received.
    UnknownKind(String),
    /// No answer the client could read.
    NoAnswer,
}

impl From<Sent> for Answered {
    fn from(sent: Sent) -> Self {
        match sent {
            Sent::Answered(outcome) => Answered::Known(outcome),
            Sent::UnknownKind(kind) => {
                Answered::Unrecognised(format!("unknown error_type '{kind}'"))
            }
            Sent::NoAnswer => Answered::Unrecognised(NO_ANSWER.to_owned()),
        }
    }
}

/// The outcome an error answer names in its `error_type`.
fn error_kind(answer: &Value) -> Sent {
    let kind = answer["error_type"].as_str().unwrap_or_default();
    match kind.parse::<Outcome>() {
        // A success named as an error would be a server bug: keep it visible.
        Ok(outcome) if !outcome.is_success() => Sent::Answered(outcome),
        _ => Sent::UnknownKind(kind.to_owned()),
    }
}

/// An HTTP client with a timeout suited to inference.
pub fn client(timeout: Duration) -> Client {
    Client::builder().timeout(timeout).finish()
}

async fn get_json(client: &Client, url: &str, post: bool) -> Result<Value, ClientError> {
    let http = |e: &dyn std::fmt::Display| ClientError::Http {
        url: url.to_owned(),
        message: e.to_string(),
    };
    let mut response = if post {
        client.post(url).send_body("{}").await
    } else {
        client.get(url).send().await
    }
    .map_err(|e| http(&e))?;
    let body = response
        .body()
        .limit(16 << 20)
        .await
        .map_err(|e| http(&e))?;
    if !response.status().is_success() {
        return Err(ClientError::Answer {
            url: url.to_owned(),
            message: format!("{} {}", response.status(), String::from_utf8_lossy(&body)),
        });
    }
    serde_json::from_slice(&body).map_err(|e| ClientError::Answer {
        url: url.to_owned(),
        message: e.to_string(),
    })
}

/// Names of the server's ready models, from the repository index.
pub async fn ready_models(client: &Client, base: &str) -> Result<Vec<String>, ClientError> {
    let url = format!("{base}/v2/repository/index");
    let index = get_json(client, &url, true).await?;
    let names = index
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["state"] == "READY");
    Ok(names
        .filter_map(|e| e["name"].as_str().map(str::to_owned))
        .collect())
}

/// Reads a model's metadata and prepares a zero-filled binary request for it.
pub async fn prepare(client: &Client, base: &str, model: &str) -> Result<Prepared, ClientError> {
    let url = format!("{base}/v2/models/{model}");
    let metadata = get_json(client, &url, false).await?;
    let bad = |message: String| ClientError::Answer {
        url: url.clone(),
        message,
    };
    let mut inputs = Vec::new();
    let mut data = Vec::new();
    for input in metadata["inputs"].as_array().into_iter().flatten() {
        let name = input["name"].as_str().unwrap_or_default();
        let datatype = input["datatype"].as_str().unwrap_or_default();
        let element = serde_json::from_value::<DataType>(Value::from(datatype))
            .map_err(|_| bad(format!("input '{name}' has unknown datatype {datatype}")))?
            .size()
            // A BYTES element: an empty string, its 4-byte length prefix.
            .unwrap_or(4);
        // Variable dimensions (-1, the batch one included) are sent as 1.
        let shape: Vec<u64> = input["shape"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|d| d.as_i64().map_or(1, |d| d.max(1) as u64))
            .collect();
        let size = shape.iter().product::<u64>() as usize * element;
        data.resize(data.len() + size, 0u8);
        inputs.push(json!({"name": name, "shape": shape, "datatype": datatype,
                           "parameters": {"binary_data_size": size}}));
    }
    let inputs = Value::from(inputs);
    let header = json!({"inputs": inputs, "parameters": {"binary_data_output": true}});
    let mut body = header.to_string().into_bytes();
    let header_length = body.len();
    body.extend_from_slice(&data);
    Ok(Prepared {
        model: model.to_owned(),
        url: format!("{base}/v2/models/{model}/infer"),
        inputs,
        data,
        header_length,
        body: body.into(),
    })
}

/// Sends one prepared request, with `slo` as its objective if given.
pub async fn send(client: &Client, request: &Prepared, slo: Option<Nanos>) -> Sent {
    let (header_length, body) = request.body(slo);
    let sent = client
        .post(&request.url)
        .insert_header((CONTENT_TYPE, "application/octet-stream"))
        .insert_header((HEADER_LENGTH, header_length.to_string()))
        .send_body(body)
        .await;
    let Ok(mut response) = sent else {
        return Sent::NoAnswer;
    };
    let status = response.status();
    let Ok(body) = response.body().limit(64 << 20).await else {
        return Sent::NoAnswer;
    };
    let json_length = response
        .headers()
        .get(HEADER_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<usize>().ok())
        .unwrap_or(body.len())
        .min(body.len());
    let answer: Value = serde_json::from_slice(&body[..json_length]).unwrap_or(Value::Null);
    if !status.is_success() {
        return error_kind(&answer);
    }
    match answer["parameters"]["late"].as_bool() {
        Some(true) => Sent::Answered(Outcome::Late),
        _ => Sent::Answered(Outcome::Ok),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn error_types_are_read_as_outcomes_and_unknown_ones_kept_by_name() {
        let answer = |kind: &str| json!({"error": "x", "error_type": kind});
        assert_eq!(
            error_kind(&answer("load_failed")),
            Sent::Answered(Outcome::LoadFailed)
        );
        assert_eq!(
            error_kind(&answer("timed_out")),
            Sent::Answered(Outcome::TimedOut)
        );
        assert_eq!(
            error_kind(&answer("brand_new")),
            Sent::UnknownKind("brand_new".into())
        );
        assert_eq!(error_kind(&answer("ok")), Sent::UnknownKind("ok".into()));
        assert_eq!(
            Answered::from(Sent::UnknownKind("brand_new".into())),
            Answered::Unrecognised("unknown error_type 'brand_new'".into())
        );
    }
}
