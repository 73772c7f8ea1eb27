//! Mutual TLS from one shared secret.
//!
//! Every node derives the same certificate authority from the secret: an Ed25519 key from
//! HKDF-SHA256(secret), and a self-signed CA certificate with fixed fields (serial, names,
//! validity), so the bytes are identical on every node (Ed25519 signatures are deterministic).
//! Each node then makes a fresh key of its own and a leaf certificate signed by that CA. Both
//! sides of every QUIC connection present their leaf and require the peer's to chain to the
//! CA: a process without the secret cannot produce such a chain and fails the handshake,
//! before it can send one frame. The CA key never leaves memory and is never written.
//!
//! Leaves carry the fixed DNS name `vkml-node` (checked by the client as the server name), so
//! nodes are addressed by IP or by any DNS name without certificates per address.

use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SerialNumber, date_time_ymd,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

use super::ClusterError;
use super::secret::Secret;

/// The name every leaf certificate carries and every client expects.
pub const SERVER_NAME: &str = "vkml-node";

/// The PKCS#8 v1 wrapping of a raw Ed25519 seed (RFC 8410): a fixed prefix, then 32 bytes.
const ED25519_PKCS8_PREFIX: [u8; 16] = [
    0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20,
];

fn tls_err(what: &str) -> impl Fn(String) -> ClusterError + '_ {
    move |e| ClusterError::Tls(format!("{what}: {e}"))
}

struct SeedLen;
impl ring::hkdf::KeyType for SeedLen {
    fn len(&self) -> usize {
        32
    }
}

/// The CA key: HKDF-SHA256 over the secret, with a label that names its use.
fn ca_key(secret: &Secret) -> Result<KeyPair, ClusterError> {
    let salt = ring::hkdf::Salt::new(ring::hkdf::HKDF_SHA256, b"vkml cluster v1");
    let prk = salt.extract(secret.bytes());
    let mut seed = [0u8; 32];
    prk.expand(&[b"vkml cluster ca"], SeedLen)
        .and_then(|okm| okm.fill(&mut seed))
        .map_err(|_| ClusterError::Tls("HKDF failed".into()))?;
    let mut der = ED25519_PKCS8_PREFIX.to_vec();
    der.extend_from_slice(&seed);
    KeyPair::from_pkcs8_der_and_sign_algo(&PrivatePkcs8KeyDer::from(der), &rcgen::PKCS_ED25519)
        .map_err(|e| tls_err("CA key")(e.to_string()))
}

/// Every field fixed, so every node builds the same certificate.
fn ca_params() -> Result<CertificateParams, ClusterError> {
    let mut p = CertificateParams::new(Vec::<String>::new())
        .map_err(|e| tls_err("CA params")(e.to_string()))?;
    p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    p.distinguished_name = rcgen::DistinguishedName::new();
    p.distinguished_name
        .push(DnType::CommonName, "vkml cluster CA");
    p.serial_number = Some(SerialNumber::from_slice(&[1]));
    p.not_before = date_time_ymd(2024, 1, 1);
    p.not_after = date_time_ymd(2124, 1, 1);
    p.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    Ok(p)
}

/// ring's suites with AES-128-GCM first: every byte of a tensor is encrypted once and
/// decrypted once, and AES-128 does that in ~70% of AES-256's time with the same AES-NI path;
/// 128-bit keys are QUIC's baseline (its Initial packets use them).
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    let mut p = rustls::crypto::ring::default_provider();
    p.cipher_suites
        .sort_by_key(|s| s.suite() != rustls::CipherSuite::TLS13_AES_128_GCM_SHA256);
    Arc::new(p)
}

/// This node's TLS material: the cluster CA and its own leaf.
pub struct NodeTls {
    pub ca: CertificateDer<'static>,
    pub cert: CertificateDer<'static>,
    key: PrivatePkcs8KeyDer<'static>,
}

impl NodeTls {
    pub fn new(secret: &Secret, node_name: &str) -> Result<NodeTls, ClusterError> {
        let ca_key = ca_key(secret)?;
        let ca_params = ca_params()?;
        let ca = ca_params
            .self_signed(&ca_key)
            .map_err(|e| tls_err("CA certificate")(e.to_string()))?;
        let leaf_key = KeyPair::generate_for(&rcgen::PKCS_ED25519)
            .map_err(|e| tls_err("node key")(e.to_string()))?;
        let mut p = CertificateParams::new(vec![SERVER_NAME.to_string()])
            .map_err(|e| tls_err("node params")(e.to_string()))?;
        p.distinguished_name = rcgen::DistinguishedName::new();
        p.distinguished_name.push(DnType::CommonName, node_name);
        // Hosts' clocks may disagree; the secret, not the date, is what is being proven.
        p.not_before = date_time_ymd(2024, 1, 1);
        p.not_after = date_time_ymd(2124, 1, 1);
        p.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        p.use_authority_key_identifier_extension = true;
        let issuer = Issuer::from_params(&ca_params, &ca_key);
        let cert = p
            .signed_by(&leaf_key, &issuer)
            .map_err(|e| tls_err("node certificate")(e.to_string()))?;
        Ok(NodeTls {
            ca: ca.der().clone(),
            cert: cert.der().clone(),
            key: PrivatePkcs8KeyDer::from(leaf_key.serialize_der()),
        })
    }

    fn roots(&self) -> Result<Arc<rustls::RootCertStore>, ClusterError> {
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(self.ca.clone())
            .map_err(|e| tls_err("CA root")(e.to_string()))?;
        Ok(Arc::new(roots))
    }

    fn key(&self) -> PrivateKeyDer<'static> {
        PrivateKeyDer::Pkcs8(self.key.clone_key())
    }

    /// TLS 1.3 only (QUIC requires it), ring provider, client certificates required.
    pub fn server_config(&self, loopback: bool) -> Result<quinn::ServerConfig, ClusterError> {
        let provider = provider();
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            self.roots()?,
            provider.clone(),
        )
        .build()
        .map_err(|e| tls_err("client verifier")(e.to_string()))?;
        let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| tls_err("server config")(e.to_string()))?
            .with_client_cert_verifier(verifier)
            .with_single_cert(vec![self.cert.clone()], self.key())
            .map_err(|e| tls_err("server certificate")(e.to_string()))?;
        cfg.alpn_protocols = vec![vkml_protocol::ALPN.to_vec()];
        let quic = quinn::crypto::rustls::QuicServerConfig::try_from(cfg)
            .map_err(|e| tls_err("QUIC server config")(e.to_string()))?;
        let mut server = quinn::ServerConfig::with_crypto(Arc::new(quic));
        server.transport_config(super::transport::transport_config(loopback));
        Ok(server)
    }

    pub fn client_config(&self, loopback: bool) -> Result<quinn::ClientConfig, ClusterError> {
        let provider = provider();
        let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| tls_err("client config")(e.to_string()))?
            .with_root_certificates(self.roots()?)
            .with_client_auth_cert(vec![self.cert.clone()], self.key())
            .map_err(|e| tls_err("client certificate")(e.to_string()))?;
        cfg.alpn_protocols = vec![vkml_protocol::ALPN.to_vec()];
        let quic = quinn::crypto::rustls::QuicClientConfig::try_from(cfg)
            .map_err(|e| tls_err("QUIC client config")(e.to_string()))?;
        let mut client = quinn::ClientConfig::new(Arc::new(quic));
        client.transport_config(super::transport::transport_config(loopback));
        Ok(client)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_secret_same_ca_different_leaves() {
        let s = Secret::generate().unwrap();
        let a = NodeTls::new(&s, "a").unwrap();
        let b = NodeTls::new(&s, "b").unwrap();
        assert_eq!(a.ca, b.ca);
        assert_ne!(a.cert, b.cert);
        let other = NodeTls::new(&Secret::generate().unwrap(), "a").unwrap();
        assert_ne!(a.ca, other.ca);
    }
}
