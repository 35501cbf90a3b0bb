//! Who may call the API and over what: `[server.auth]` (bearer tokens), `[server.tls]`
//! (a certificate and key for HTTPS) and `[server.connections]` (the limits that keep
//! idle and slow clients from holding the server).
//!
//! Tokens are secrets: their `Debug` prints only how many there are, so a logged
//! configuration (or a panic message holding one) never shows them, and they can come
//! from the environment instead of the file (see [`AuthConfig::ADMIN_ENV`] and
//! [`AuthConfig::INFER_ENV`]), so the file can be kept in version control.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

/// One bearer token. Only its holder's code can read it ([`Token::expose`]); it is never
/// printed.
#[derive(Clone, Deserialize, PartialEq, Eq)]
#[serde(transparent)]
pub struct Token(String);

impl Token {
    /// A token of that text.
    pub fn new(text: impl Into<String>) -> Self {
        Self(text.into())
    }

    /// Its bytes, for the comparison with a request's token.
    pub fn expose(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

/// What a token lets its holder do: the two lists of [`AuthConfig`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Change the server's state: load and unload models.
    Admin,
    /// Run inference.
    Infer,
}

impl Role {
    /// Its name in error messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Infer => "inference",
        }
    }
}

/// Bearer tokens of the API. A list that is absent (or empty) leaves its routes open.
///
/// Which routes each list guards is decided in one place, `src/api/access.rs`: the admin
/// tokens guard every route that changes the server's state (repository load and unload),
/// the inference tokens the inference routes; an admin token is accepted for inference
/// too. Health, metadata, the repository index, metrics and the OpenAPI document stay open.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// Tokens that may change the server's state (load and unload models). Replaced by
    /// `CLOCKWORK_ADMIN_TOKENS` (comma-separated) when that is set.
    pub admin_tokens: Option<Vec<Token>>,
    /// Tokens that may run inference. Replaced by `CLOCKWORK_INFER_TOKENS`
    /// (comma-separated) when that is set.
    pub infer_tokens: Option<Vec<Token>>,
}

impl AuthConfig {
    /// The environment variable that replaces `admin_tokens`.
    pub const ADMIN_ENV: &'static str = "CLOCKWORK_ADMIN_TOKENS";
    /// The environment variable that replaces `infer_tokens`.
    pub const INFER_ENV: &'static str = "CLOCKWORK_INFER_TOKENS";

    /// The tokens with those of the environment (read through `var`) in place of the
    /// file's where set. Empty items of a list are dropped (a trailing comma is no token).
    pub fn with_env(mut self, var: impl Fn(&str) -> Option<String>) -> Self {
        let tokens = |text: String| -> Vec<Token> {
            text.split(',')
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(Token::new)
                .collect()
        };
        if let Some(text) = var(Self::ADMIN_ENV) {
            self.admin_tokens = Some(tokens(text));
        }
        if let Some(text) = var(Self::INFER_ENV) {
            self.infer_tokens = Some(tokens(text));
        }
        self
    }

    /// Checks that no configured token is empty: an empty token would be matched by an
    /// empty `Authorization: Bearer ` header.
    pub fn validate(&self) -> Result<(), String> {
        let lists = [
            ("admin_tokens", &self.admin_tokens),
            ("infer_tokens", &self.infer_tokens),
        ];
        for (key, list) in lists {
            if list.iter().flatten().any(|t| t.expose().is_empty()) {
                return Err(format!("server.auth.{key} holds an empty token"));
            }
        }
        Ok(())
    }
}

/// HTTPS: the server speaks TLS (rustls) when both files are set, plain HTTP when neither
/// is; one without the other is refused at start.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TlsConfig {
    /// PEM file of the certificate chain, the server's own certificate first.
    pub cert: Option<PathBuf>,
    /// PEM file of the certificate's private key (PKCS#8, PKCS#1 or SEC1).
    pub key: Option<PathBuf>,
}

impl TlsConfig {
    /// The two files, if TLS is configured; an error names the one missing.
    pub fn files(&self) -> Result<Option<(&PathBuf, &PathBuf)>, String> {
        match (&self.cert, &self.key) {
            (Some(cert), Some(key)) => Ok(Some((cert, key))),
            (None, None) => Ok(None),
            (Some(_), None) => Err("server.tls.cert is set but server.tls.key is not".into()),
            (None, Some(_)) => Err("server.tls.key is set but server.tls.cert is not".into()),
        }
    }
}

/// Limits of the HTTP connections (actix-web's) and of the gRPC port's
/// (`api::grpc::incoming`), so that clients that connect and say nothing, send their
/// headers a byte at a time or keep idle connections open cannot take the server from
/// others: each is dropped after a bounded time, or (an established gRPC connection)
/// counted against a bound. A slow inference body is refused by the edge once it cannot
/// be answered in time (`deadline_unreachable`).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConnectionConfig {
    /// Time a new connection has to deliver its first request's headers, whole; past it
    /// the server answers 408 and closes it (slow or silent clients). A gRPC connection
    /// has as long to send HTTP/2's preface, else it is closed.
    #[serde(with = "humantime_serde")]
    pub request_head_timeout: Duration,
    /// How long an idle connection is kept open between requests.
    #[serde(with = "humantime_serde")]
    pub keep_alive: Duration,
    /// Time a client has to close its side after the server closed the connection. A
    /// connection closed with its request's body unread (a refusal before reading) is
    /// read and dropped meanwhile, so that a client still sending reads its answer rather
    /// than a reset; 0 closes it at once, which saves the server receiving refused
    /// bodies at that risk.
    #[serde(with = "humantime_serde")]
    pub disconnect_timeout: Duration,
    /// Connections each HTTP worker serves at once; more wait in the listen backlog.
    pub max_connections: usize,
    /// TLS handshakes each worker runs at once (they cost CPU).
    pub max_tls_handshakes: usize,
    /// Connections the gRPC port (`grpc_listen`) serves at once; more wait in the listen
    /// backlog. A gRPC client multiplexes its calls on one connection; the bound keeps
    /// clients that open many from taking the process's file descriptors.
    pub grpc_max_connections: usize,
    /// Calls (HTTP/2 streams) one gRPC connection carries at once, announced to the
    /// client (`SETTINGS_MAX_CONCURRENT_STREAMS`): a client waits for one to end before
    /// starting another, and a stream past it is refused. With `grpc_max_connections` it
    /// bounds the calls the port holds, each with its task and, for a stream of requests,
    /// up to 256 of them in flight.
    pub grpc_max_streams: u32,
}

impl Default for ConnectionConfig {
    fn default() -> Self {
        Self {
            request_head_timeout: Duration::from_secs(5),
            keep_alive: Duration::from_secs(5),
            disconnect_timeout: Duration::from_secs(1),
            max_connections: 25_000,
            max_tls_handshakes: 256,
            grpc_max_connections: 1_024,
            grpc_max_streams: 128,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_never_printed() {
        let auth = AuthConfig {
            admin_tokens: Some(vec![Token::new("s3cret-admin")]),
            infer_tokens: Some(vec![Token::new("s3cret-infer")]),
        };
        let shown = format!("{auth:?} {auth:#?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("redacted"), "{shown}");
    }

    #[test]
    fn the_environment_replaces_the_files_tokens() {
        let file = AuthConfig {
            admin_tokens: Some(vec![Token::new("from-file")]),
            infer_tokens: Some(vec![Token::new("kept")]),
        };
        let env = |name: &str| (name == AuthConfig::ADMIN_ENV).then(|| " a, b ,,".to_owned());
        let auth = file.with_env(env);
        assert_eq!(
            auth.admin_tokens,
            Some(vec![Token::new("a"), Token::new("b")])
        );
        assert_eq!(auth.infer_tokens, Some(vec![Token::new("kept")]));
    }

    #[test]
    fn empty_tokens_and_half_tls_are_refused() {
        let auth = AuthConfig {
            admin_tokens: None,
            infer_tokens: Some(vec![Token::new("")]),
        };
        assert!(auth.validate().unwrap_err().contains("infer_tokens"));
        let half = TlsConfig {
            cert: Some("c.pem".into()),
            key: None,
        };
        assert!(half.files().unwrap_err().contains("server.tls.key"));
        assert_eq!(TlsConfig::default().files(), Ok(None));
    }
}
