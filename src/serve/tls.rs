//! HTTPS for `clockwork serve`: the rustls configuration from `[server.tls]`'s PEM files.
//!
//! Read once at start; a file that is missing, unreadable or holds no certificate or key
//! stops the start with an error naming the file, rather than serving plain HTTP where
//! HTTPS was asked for.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// Why the TLS configuration cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read TLS {what} {path}: {source}")]
    Read {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: pem::Error,
    },
    #[error("TLS certificate file {0} holds no PEM certificate")]
    NoCertificate(PathBuf),
    #[error("TLS certificate {cert} and key {key} cannot be used: {source}")]
    Rejected {
        cert: PathBuf,
        key: PathBuf,
        #[source]
        source: rustls::Error,
    },
}

/// The server's TLS configuration from a certificate chain and its private key (PEM).
/// The crypto provider is named here (ring) rather than taken from a process default.
pub fn server_config(cert: &Path, key: &Path) -> Result<rustls::ServerConfig, TlsError> {
    fn read<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(pem::Error) -> TlsError + 'a {
        move |source| TlsError::Read {
            what,
            path: path.to_owned(),
            source,
        }
    }
    let chain = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(read("certificate", cert))?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate(cert.to_owned()));
    }
    let private = PrivateKeyDer::from_pem_file(key).map_err(read("key", key))?;
    let rejected = |source| TlsError::Rejected {
        cert: cert.to_owned(),
        key: key.to_owned(),
        source,
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(rejected)?
        .with_no_client_auth()
        .with_single_cert(chain, private)
        .map_err(rejected)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str, text: &str) -> PathBuf {
        let path =
            std::env::temp_dir().join(format!("clockwork-tls-{}-{name}", std::process::id()));
        std::fs::write(&path, text).expect("write");
        path
    }

    #[test]
    fn a_generated_pair_is_accepted() {
        let pair = rcgen::generate_simple_self_signed(vec!["localhost".into()]).expect("cert");
        let cert = temp("ok-cert.pem", &pair.cert.pem());
        let key = temp("ok-key.pem", &pair.signing_key.serialize_pem());
        assert!(server_config(&cert, &key).is_ok());
        // A key that is not the certificate's is refused at start.
        let other = rcgen::generate_simple_self_signed(vec!["localhost".into()]).expect("cert");
        let wrong = temp("wrong-key.pem", &other.signing_key.serialize_pem());
        let error = server_config(&cert, &wrong).expect_err("mismatched key");
        assert!(matches!(error, TlsError::Rejected { .. }), "{error}");
    }

    #[test]
    fn missing_and_bad_files_are_named() {
        let missing = Path::new("/nonexistent/clockwork/cert.pem");
        let error = server_config(missing, missing).expect_err("missing");
        assert!(
            error
                .to_string()
                .contains("/nonexistent/clockwork/cert.pem"),
            "{error}"
        );
        let garbage = temp("garbage.pem", "not a certificate\n");
        let error = server_config(&garbage, &garbage).expect_err("garbage");
        assert!(matches!(error, TlsError::NoCertificate(_)), "{error}");
        let pair = rcgen::generate_simple_self_signed(vec!["localhost".into()]).expect("cert");
        let cert = temp("nokey-cert.pem", &pair.cert.pem());
        let error = server_config(&cert, &garbage).expect_err("no key");
        assert!(error.to_string().contains("key"), "{error}");
    }
}
