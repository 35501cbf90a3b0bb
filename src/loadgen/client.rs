//! One HTTP inference, as the load generator prepares it and sends it with awc (its answer
//! is read in `answer.rs`; the plain HTTP/1.1 client is `h1.rs`).
//!
//! Requests are prepared once per model (binary tensor extension, inputs of the model's
//! shapes, binary outputs), so sending costs one copy of a shared buffer. FP32 inputs are
//! seeded random values, uniform in [-1, 1), in [`VARIANTS`] bodies sent in turn: a
//! pipeline's data-dependent fan-out then spreads as it does on real inputs (zero-filled
//! images made every zoo detector crop pass); other datatypes are zero-filled.

use std::time::Duration;

use awc::error::{ConnectError, SendRequestError};
use awc::http::header::CONTENT_TYPE;
use awc::http::Uri;
use awc::{Client, Connector};
use serde_json::{json, Value};

use actix_web::web::Bytes;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::answer::{NoAnswer, Reply, SERVER_TIMING};
use crate::api::HEADER_LENGTH;
use crate::model::DataType;
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
    /// `url` parsed once (awc parses a string on every request).
    uri: Uri,
    /// The JSON header's inputs, for requests that need their own header.
    inputs: Value,
    /// The binary input data after the header, one per variant.
    data: Vec<Vec<u8>>,
    /// The whole body's header without request parameters but `binary_data_output`.
    header_length: usize,
    /// The whole bodies, one per variant.
    bodies: Vec<Bytes>,
    /// The whole requests (head and body) for the plain HTTP/1.1 client, one per variant.
    plain: Vec<Bytes>,
}

/// Input bodies prepared per model, sent in turn.
pub const VARIANTS: usize = 64;

impl Prepared {
    /// Header length and body of the `n`-th request (its variant `n % VARIANTS`), with
    /// `slo` as the request's `slo_ms` if given.
    fn body(&self, slo: Option<Nanos>, n: u64) -> (usize, Bytes) {
        let variant = (n % self.bodies.len() as u64) as usize;
        let Some(slo) = slo else {
            return (self.header_length, self.bodies[variant].clone());
        };
        let header = json!({"inputs": self.inputs, "parameters":
            {"binary_data_output": true, "slo_ms": slo as f64 / 1e6}});
        let mut body = header.to_string().into_bytes();
        let length = body.len();
        body.extend_from_slice(&self.data[variant]);
        (length, body.into())
    }

    /// The `n`-th request whole, head and body, for `h1::Pool` (built here only when
    /// it has its own `slo`).
    pub(super) fn whole(&self, slo: Option<Nanos>, n: u64) -> Bytes {
        if slo.is_none() {
            return self.plain[(n % self.plain.len() as u64) as usize].clone();
        }
        let (length, body) = self.body(slo, n);
        self.request(length, &body)
    }

    fn request(&self, header_length: usize, body: &[u8]) -> Bytes {
        let host = self.uri.authority().map_or("", |a| a.as_str());
        plain_request(host, self.uri.path(), header_length, body)
    }
}

/// A whole request for `h1::Pool`: head and body in one buffer, sent in one write.
pub(super) fn plain_request(host: &str, path: &str, header_length: usize, body: &[u8]) -> Bytes {
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/octet-stream\r\n\
         inference-header-content-length: {header_length}\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    let mut whole = Vec::with_capacity(head.len() + body.len());
    whole.extend_from_slice(head.as_bytes());
    whole.extend_from_slice(body);
    whole.into()
}

/// `size` bytes of input: FP32 values uniform in [-1, 1) from `rng`, else zeros.
fn input_data(datatype: DataType, size: usize, rng: &mut StdRng) -> Vec<u8> {
    if datatype != DataType::Fp32 {
        return vec![0; size];
    }
    (0..size / 4)
        .flat_map(|_| rng.random_range(-1.0f32..1.0).to_le_bytes())
        .collect()
}

/// An HTTP client with a timeout suited to inference and up to `connections` open
/// connections (awc's default of 100 made arrivals beyond it wait for one inside the
/// client, and that wait was counted as the server's latency).
///
/// Connections idle longer than `IDLE_REUSE` (2 s) are not reused. awc keeps them 15 s by
/// default, longer than many servers do (actix-web closes them after 5 s), and it checks
/// a kept connection for the server's close only through the reactor's readiness: after
/// the thread was busy (preparing a large model's bodies took over 5 s in a debug build on
/// a loaded machine), the close had not been seen, the request went out on the closed
/// connection and came back "connector has been disconnected".
pub fn client(timeout: Duration, connections: usize) -> Client {
    let connector = Connector::new()
        .limit(connections)
        .timeout(timeout)
        .conn_keep_alive(IDLE_REUSE);
    Client::builder()
        .connector(connector)
        .timeout(timeout)
        .finish()
}

/// How long an idle connection may wait for its next request (below the 5 s after which
/// actix-web, and so the server, closes it).
pub(super) const IDLE_REUSE: Duration = Duration::from_secs(2);

/// GETs `url` (or POSTs `{}` to it) and reads its JSON answer. These calls are idempotent:
/// one that finds its connection closed by the server before any answer came is sent
/// again, once, on a new one.
async fn get_json(client: &Client, url: &str, post: bool) -> Result<Value, ClientError> {
    let http = |e: &dyn std::fmt::Display| ClientError::Http {
        url: url.to_owned(),
        message: e.to_string(),
    };
    let send = || async {
        if post {
            client.post(url).send_body("{}").await
        } else {
            client.get(url).send().await
        }
    };
    let mut response = match send().await {
        Err(SendRequestError::Connect(ConnectError::Disconnected)) => send().await,
        sent => sent,
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

/// Reads a model's metadata and prepares its binary requests (`VARIANTS` of them, FP32
/// inputs drawn from `seed`).
pub async fn prepare(
    client: &Client,
    base: &str,
    model: &str,
    seed: u64,
) -> Result<Prepared, ClientError> {
    let url = format!("{base}/v2/models/{model}");
    let metadata = get_json(client, &url, false).await?;
    let bad = |message: String| ClientError::Answer {
        url: url.clone(),
        message,
    };
    let mut inputs = Vec::new();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut data = vec![Vec::new(); VARIANTS];
    for input in metadata["inputs"].as_array().into_iter().flatten() {
        let name = input["name"].as_str().unwrap_or_default();
        let datatype = input["datatype"].as_str().unwrap_or_default();
        let typed = serde_json::from_value::<DataType>(Value::from(datatype))
            .map_err(|_| bad(format!("input '{name}' has unknown datatype {datatype}")))?;
        let element = typed
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
        for variant in &mut data {
            variant.extend(input_data(typed, size, &mut rng));
        }
        inputs.push(json!({"name": name, "shape": shape, "datatype": datatype,
                           "parameters": {"binary_data_size": size}}));
    }
    let inputs = Value::from(inputs);
    let header = json!({"inputs": inputs, "parameters": {"binary_data_output": true}});
    let header = header.to_string().into_bytes();
    let bodies = data
        .iter()
        .map(|d| Bytes::from([&header[..], d].concat()))
        .collect();
    let url = format!("{base}/v2/models/{model}/infer");
    let uri = url.parse::<Uri>().map_err(|e| ClientError::Http {
        url: url.clone(),
        message: e.to_string(),
    })?;
    let mut prepared = Prepared {
        model: model.to_owned(),
        url,
        uri,
        inputs,
        data,
        header_length: header.len(),
        bodies,
        plain: Vec::new(),
    };
    prepared.plain = (prepared.bodies.iter())
        .map(|body| prepared.request(prepared.header_length, body))
        .collect();
    Ok(prepared)
}

/// Sends the `n`-th request of a prepared model with awc (HTTPS; the plain client is in
/// `h1.rs`), with `slo` as its objective if given.
pub(super) async fn send_awc(
    client: &Client,
    request: &Prepared,
    slo: Option<Nanos>,
    n: u64,
) -> Reply {
    let (header_length, body) = request.body(slo, n);
    let began = std::time::Instant::now();
    let sent = client
        .post(request.uri.clone())
        .insert_header((CONTENT_TYPE, "application/octet-stream"))
        .insert_header((HEADER_LENGTH, header_length))
        .send_body(body)
        .await;
    let mut response = match sent {
        Ok(response) => response,
        Err(error) => return Reply::none(NoAnswer::of(&error)),
    };
    let Ok(body) = response.body().limit(64 << 20).await else {
        return Reply::none(NoAnswer::Other);
    };
    let headers = response.headers();
    let json_length = headers
        .get(HEADER_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<usize>().ok())
        .unwrap_or(body.len())
        .min(body.len());
    let timing = headers.get(SERVER_TIMING).and_then(|v| v.to_str().ok());
    let success = response.status().is_success();
    Reply::read(success, &body[..json_length], timing, began.elapsed())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fp32_inputs_are_seeded_and_spread_and_others_zero() {
        let draw = |seed| input_data(DataType::Fp32, 4 * 200, &mut StdRng::seed_from_u64(seed));
        assert_eq!(draw(1), draw(1), "seeded");
        assert_ne!(draw(1), draw(2));
        let values: Vec<f32> = draw(1)
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        assert!(values.iter().all(|v| (-1.0..1.0).contains(v)));
        let (least, most) = values
            .iter()
            .fold((1.0f32, -1.0f32), |(l, m), &v| (l.min(v), m.max(v)));
        assert!(
            least < -0.9 && most > 0.9,
            "uniform over [-1, 1): {least}..{most}"
        );
        let mut rng = StdRng::seed_from_u64(1);
        assert_eq!(input_data(DataType::Int32, 8, &mut rng), vec![0; 8]);
    }

    #[test]
    fn requests_take_the_variants_in_turn() {
        let prepared = Prepared {
            model: "m".into(),
            url: "http://h/u".into(),
            uri: Uri::from_static("http://h/u"),
            inputs: json!([]),
            data: vec![vec![1], vec![2]],
            header_length: 2,
            bodies: vec![Bytes::from_static(b"{}\x01"), Bytes::from_static(b"{}\x02")],
            plain: vec![Bytes::from_static(b"1"), Bytes::from_static(b"2")],
        };
        let body = |n| prepared.body(None, n).1;
        assert_ne!(body(0), body(1));
        assert_eq!(body(0), body(2));
        let (length, with_slo) = prepared.body(Some(5_000_000), 1);
        assert_eq!(
            with_slo.last(),
            Some(&2),
            "the same variant with its own header"
        );
        assert!(String::from_utf8_lossy(&with_slo[..length]).contains("slo_ms"));
        assert_eq!(prepared.whole(None, 3), Bytes::from_static(b"2"));
        let whole = prepared.whole(Some(5_000_000), 3);
        assert!(whole.starts_with(b"POST /u HTTP/1.1\r\nhost: h\r\n"));
        assert!(whole.ends_with(b"\x02") && String::from_utf8_lossy(&whole).contains("slo_ms"));
    }

    #[test]
    fn a_request_is_its_head_then_its_body() {
        let whole = plain_request("h:1", "/v2/models/m/infer", 2, b"{}\x01");
        let text = String::from_utf8_lossy(&whole);
        assert!(text.starts_with("POST /v2/models/m/infer HTTP/1.1\r\n"));
        assert!(text.contains("content-length: 3\r\n"));
        assert!(text.contains("inference-header-content-length: 2\r\n"));
        assert!(whole.ends_with(b"\r\n\r\n{}\x01"));
    }
}
