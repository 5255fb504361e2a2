//! A certificate named in `upstream.extra_roots` is trusted as it is, also
//! when the origin serves it as its own certificate. `openssl req -x509`
//! makes a self-signed certificate marked CA:TRUE, which webpki refuses as
//! an end entity (`CaUsedAsEndEntity`) however it is trusted; an operator
//! who names that exact certificate (`mannerly run --local cert.pem`) has
//! pinned it, which is a narrower trust than the CA it stands for.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{verify_server_name, WebPkiServerVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{DigitallySignedStruct, Error, SignatureScheme};

/// webpki's verifier, plus the named certificates accepted verbatim.
#[derive(Debug)]
pub(crate) struct Pinned {
    inner: Arc<WebPkiServerVerifier>,
    exact: Vec<CertificateDer<'static>>,
}

impl Pinned {
    pub(crate) fn new(
        inner: Arc<WebPkiServerVerifier>,
        exact: Vec<CertificateDer<'static>>,
    ) -> Self {
        Pinned { inner, exact }
    }
}

/// webpki's `CaUsedAsEndEntity`, which rustls passes on as an opaque
/// `Other` error: its name is all that can be matched.
pub(crate) fn ca_used_as_end_entity(e: &Error) -> bool {
    matches!(e, Error::InvalidCertificate(rustls::CertificateError::Other(o))
        if format!("{o:?}").contains("CaUsedAsEndEntity"))
}

impl ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        match self
            .inner
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(e)
                if ca_used_as_end_entity(&e)
                    && self.exact.iter().any(|c| c.as_ref() == end_entity.as_ref()) =>
            {
                // Pinned: the bytes are the operator's own; the name must
                // still be the one asked for.
                verify_server_name(&ParsedCertificate::try_from(end_entity)?, server_name)?;
                Ok(ServerCertVerified::assertion())
            }
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}
