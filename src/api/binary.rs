//! Triton's binary tensor data extension.
//!
//! A request whose `Inference-Header-Content-Length` header is N carries its JSON header in
//! the first N bytes of the body and the data of every input with a `binary_data_size`
//! parameter after it, back to back, in the order of the inputs. A response with binary
//! outputs does the same the other way: JSON header, then each binary output's bytes in
//! the order of the outputs, and the header says where the JSON ends.

use actix_web::http::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE};
use actix_web::web::Bytes;
use actix_web::HttpResponse;

use super::error::ApiError;

/// Header naming the length of the JSON part of a body.
pub const HEADER_LENGTH: &str = "Inference-Header-Content-Length";

/// [`HEADER_LENGTH`] as a header name made at compile time (lowercase, as HTTP/1 maps
/// keep names): making it from the text allocated on every request.
pub const HEADER_LENGTH_NAME: HeaderName =
    HeaderName::from_static("inference-header-content-length");

/// The content types of answers, made at compile time (from a `&str` each answer
/// allocated a copy).
const JSON: HeaderValue = HeaderValue::from_static("application/json");
const OCTETS: HeaderValue = HeaderValue::from_static("application/octet-stream");

/// Splits a request body into its JSON header and the binary data after it.
pub fn split(headers: &HeaderMap, body: Bytes) -> Result<(Bytes, Bytes), ApiError> {
    let Some(value) = headers.get(HEADER_LENGTH_NAME) else {
        return Ok((body, Bytes::new()));
    };
    let length = value
        .to_str()
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .ok_or_else(|| {
            ApiError::InvalidBinary(format!(
                "{HEADER_LENGTH} must be a byte count, got {value:?}"
            ))
        })?;
    if length > body.len() {
        return Err(ApiError::InvalidBinary(format!(
            "{HEADER_LENGTH} is {length} but the body has only {} bytes",
            body.len()
        )));
    }
    let binary = body.slice(length..);
    Ok((body.slice(..length), binary))
}

/// Hands out the binary sections of a request in order.
pub struct Sections {
    data: Bytes,
    offset: usize,
}

impl Sections {
    pub fn new(data: Bytes) -> Self {
        Self { data, offset: 0 }
    }

    /// The next `size` bytes, for input `name`.
    pub fn take(&mut self, name: &str, size: usize) -> Result<Bytes, ApiError> {
        let end = self
            .offset
            .checked_add(size)
            .filter(|&e| e <= self.data.len());
        let Some(end) = end else {
            return Err(ApiError::InvalidBinary(format!(
                "input '{name}' declares {size} bytes of binary data but only {} remain in the body",
                self.data.len() - self.offset
            )));
        };
        let section = self.data.slice(self.offset..end);
        self.offset = end;
        Ok(section)
    }

    /// Fails if bytes are left that no input claimed.
    pub fn finish(self) -> Result<(), ApiError> {
        let left = self.data.len() - self.offset;
        if left == 0 {
            Ok(())
        } else {
            Err(ApiError::InvalidBinary(format!(
                "{left} bytes of binary data after the JSON header belong to no input \
                 (check the binary_data_size parameters)"
            )))
        }
    }
}

/// A response of a JSON header followed by binary outputs; plain JSON if there are none.
pub fn respond(json: Vec<u8>, binary: Vec<Bytes>) -> HttpResponse {
    if binary.is_empty() {
        return HttpResponse::Ok()
            .insert_header((CONTENT_TYPE, JSON))
            .body(json);
    }
    let header_length = json.len();
    let total = header_length + binary.iter().map(Bytes::len).sum::<usize>();
    let mut body = Vec::with_capacity(total);
    body.extend_from_slice(&json);
    for section in &binary {
        body.extend_from_slice(section);
    }
    HttpResponse::Ok()
        .insert_header((CONTENT_TYPE, OCTETS))
        .insert_header((HEADER_LENGTH_NAME, header_length))
        .body(body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::http::header::{HeaderName, HeaderValue};

    fn headers(length: &str) -> HeaderMap {
        let mut map = HeaderMap::new();
        map.insert(
            HeaderName::from_static("inference-header-content-length"),
            HeaderValue::from_str(length).unwrap(),
        );
        map
    }

    #[test]
    fn the_header_splits_the_body() {
        let body = Bytes::from_static(b"{}abcd");
        let (json, binary) = split(&headers("2"), body.clone()).unwrap();
        assert_eq!((&json[..], &binary[..]), (&b"{}"[..], &b"abcd"[..]));
        let (json, binary) = split(&HeaderMap::new(), body).unwrap();
        assert_eq!((json.len(), binary.len()), (6, 0));
    }

    #[test]
    fn bad_headers_and_sections_are_refused() {
        let body = Bytes::from_static(b"{}ab");
        assert!(split(&headers("x"), body.clone()).is_err());
        assert!(split(&headers("9"), body).is_err());
        let mut sections = Sections::new(Bytes::from_static(b"abc"));
        assert_eq!(&sections.take("a", 2).unwrap()[..], b"ab");
        assert!(sections.take("b", 2).is_err());
        let mut sections = Sections::new(Bytes::from_static(b"abc"));
        sections.take("a", 1).unwrap();
        assert!(sections.finish().is_err());
    }
}
