//! The `Server-Timing` header of an HTTP answer: how long the server held the request and
//! how long its batch ran.

use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::HttpResponse;

use crate::time::Nanos;

/// Tells the client, in the standard `Server-Timing` header, how long the server held the
/// request (`edge`: from its head being read to its answer encoded) and how long its batch
/// ran (`exec`, a model's requests only), in milliseconds: a client that sees an answer
/// late can tell whether the time went inside the server or before and after it (network,
/// its own queues).
pub(super) fn with_server_timing(
    mut response: HttpResponse,
    edge: Nanos,
    exec: Option<Nanos>,
) -> HttpResponse {
    use std::io::Write;
    // Milliseconds with three decimals, rounded to the microsecond, by integer
    // arithmetic: formatting an f64 to a precision was 2% of the HTTP worker's time.
    let ms = |t: Nanos| {
        let micros = t.saturating_add(500) / 1000;
        Millis(micros / 1000, micros % 1000)
    };
    // Written on the stack and copied once into the header (a String was a second
    // allocation); 64 bytes hold both durations up to 10^12 ms, past which it is left out.
    let mut buffer = [0u8; 64];
    let mut value = &mut buffer[..];
    let mut written = write!(value, "edge;dur={}", ms(edge));
    if let Some(exec) = exec {
        written = written.and_then(|()| write!(value, ", exec;dur={}", ms(exec)));
    }
    let length = 64 - value.len();
    if written.is_ok() {
        if let Ok(value) = HeaderValue::from_bytes(&buffer[..length]) {
            response.headers_mut().insert(SERVER_TIMING, value);
        }
    }
    response
}

/// Whole milliseconds and the microseconds after them, written as `ms.uuu`.
struct Millis(u64, u64);

impl std::fmt::Display for Millis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{:03}", self.0, self.1)
    }
}

/// The header [`with_server_timing`] writes.
const SERVER_TIMING: HeaderName = HeaderName::from_static("server-timing");

#[cfg(test)]
mod tests {
    use super::*;

    /// The integer formatting writes what `{:.3}` of the f64 milliseconds wrote. Mutation
    /// that breaks it: `{:03}` as `{}` (1.005 written 1.5), or truncating the microseconds.
    #[test]
    fn server_timing_writes_milliseconds_to_the_microsecond() {
        for t in [0, 1_234_567, 5_000, 1_005_400, 999_999_999, 42_000_000_000] {
            let response = with_server_timing(HttpResponse::Ok().finish(), t, Some(t));
            let header = response.headers().get(SERVER_TIMING).unwrap();
            let ms = t as f64 / 1e6;
            let expected = format!("edge;dur={ms:.3}, exec;dur={ms:.3}");
            assert_eq!(header.to_str().unwrap(), expected, "{t} ns");
        }
    }
}
