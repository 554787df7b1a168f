//! TLS client configuration shared by the Postgres and MySQL connections.
//!
//! The modes follow libpq's `sslmode` (MySQL's `ssl-mode` names map onto them):
//! - `disable`: plain TCP.
//! - `prefer`: TLS if the server offers it, plain otherwise; the certificate is not
//!   verified (as libpq does: `prefer` protects against passive eavesdropping only).
//! - `require`: TLS or fail; certificate not verified.
//! - `verify-ca`: TLS, the chain must lead to a trusted root (`sslrootcert`, or the
//!   bundled web PKI roots); the host name is not checked.
//! - `verify-full`: as `verify-ca`, and the certificate must name the host.

use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    ClientConfig, DigitallySignedStruct, Error as TlsError, RootCertStore, SignatureScheme,
};

/// How much TLS to insist on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum TlsMode {
    Disable,
    #[default]
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl TlsMode {
    /// Parses libpq's `sslmode` values and MySQL's `ssl-mode` values.
    pub fn parse(s: &str) -> Option<TlsMode> {
        Some(match s.to_ascii_lowercase().replace('_', "-").as_str() {
            "disable" | "disabled" => TlsMode::Disable,
            "allow" | "prefer" | "preferred" => TlsMode::Prefer,
            "require" | "required" => TlsMode::Require,
            "verify-ca" => TlsMode::VerifyCa,
            "verify-full" | "verify-identity" => TlsMode::VerifyFull,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            TlsMode::Disable => "disable",
            TlsMode::Prefer => "prefer",
            TlsMode::Require => "require",
            TlsMode::VerifyCa => "verify-ca",
            TlsMode::VerifyFull => "verify-full",
        }
    }

    pub fn verifies_chain(self) -> bool {
        matches!(self, TlsMode::VerifyCa | TlsMode::VerifyFull)
    }
}

/// Why a TLS configuration could not be built.
#[derive(Debug, thiserror::Error)]
pub enum TlsConfigError {
    #[error("cannot read the root certificate file {path}: {source}. Fix: point sslrootcert at a readable PEM file")]
    ReadRoot {
        path: String,
        source: std::io::Error,
    },
    #[error("the root certificate file {path} holds no PEM certificate. Fix: point sslrootcert at the CA certificate in PEM form")]
    EmptyRoot { path: String },
    #[error("cannot build the TLS verifier: {0}")]
    Verifier(String),
}

/// Builds the rustls client configuration for `mode` (not called for `disable`).
pub fn client_config(
    mode: TlsMode,
    root_cert: Option<&Path>,
) -> Result<ClientConfig, TlsConfigError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsConfigError::Verifier(e.to_string()))?;
    if !mode.verifies_chain() {
        return Ok(builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnyCert(provider)))
            .with_no_client_auth());
    }
    let mut roots = RootCertStore::empty();
    match root_cert {
        Some(path) => {
            let pem = std::fs::read(path).map_err(|source| TlsConfigError::ReadRoot {
                path: path.display().to_string(),
                source,
            })?;
            let mut any = false;
            for cert in rustls_pemfile::certs(&mut pem.as_slice()).flatten() {
                any |= roots.add(cert).is_ok();
            }
            if !any {
                return Err(TlsConfigError::EmptyRoot {
                    path: path.display().to_string(),
                });
            }
        }
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .map_err(|e| TlsConfigError::Verifier(e.to_string()))?;
    let verifier: Arc<dyn ServerCertVerifier> = if mode == TlsMode::VerifyFull {
        webpki
    } else {
        Arc::new(ChainOnly(webpki))
    };
    Ok(builder
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth())
}

/// `prefer` / `require`: encryption without authentication of the server, as libpq does.
#[derive(Debug)]
struct AcceptAnyCert(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AcceptAnyCert {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, TlsError> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `verify-ca`: the chain must verify; a name mismatch is accepted.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, TlsError> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(TlsError::InvalidCertificate(rustls::CertificateError::NotValidForName))
            | Err(TlsError::InvalidCertificate(
                rustls::CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_in_both_dialects() {
        assert_eq!(TlsMode::parse("verify-full"), Some(TlsMode::VerifyFull));
        assert_eq!(TlsMode::parse("VERIFY_IDENTITY"), Some(TlsMode::VerifyFull));
        assert_eq!(TlsMode::parse("REQUIRED"), Some(TlsMode::Require));
        assert_eq!(TlsMode::parse("disabled"), Some(TlsMode::Disable));
        assert_eq!(TlsMode::parse("bogus"), None);
    }

    #[test]
    fn missing_root_file_is_a_clear_error() {
        let e =
            client_config(TlsMode::VerifyFull, Some(Path::new("/nonexistent/ca.pem"))).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/ca.pem"));
    }
}
