//! The cluster secret: 32 random bytes, stored as hex in a file only its owner may read.
//! It never travels: nodes prove they hold it through TLS (see tls.rs).

use std::fmt;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use super::ClusterError;

/// The secret. Debug prints nothing of it, so it cannot leak into logs by accident.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Vec<u8>);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(..)")
    }
}

/// The largest key file read: `keygen` writes 65 bytes; hex of a longer key, with room for
/// whitespace, fits easily.
const MAX_KEY_FILE: u64 = 4096;

/// The fixed "secret" of `--insecure` clusters: public, so allowed only on loopback.
const INSECURE: &[u8] = b"vkml insecure loopback cluster, not a secret";

impl Secret {
    pub fn generate() -> Result<Secret, ClusterError> {
        let mut b = vec![0u8; 32];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut b)
            .map_err(|_| ClusterError::Key("the system random generator failed".into()))?;
        Ok(Secret(b))
    }

    pub fn insecure() -> Secret {
        Secret(INSECURE.to_vec())
    }

    pub fn bytes(&self) -> &[u8] {
        &self.0
    }

    /// Writes a new key file with mode 0600; refuses to overwrite one.
    pub fn write_new(&self, path: &Path) -> Result<(), ClusterError> {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(|e| ClusterError::Key(format!("cannot create {}: {e}", path.display())))?;
        let hex: String = self.0.iter().map(|b| format!("{b:02x}")).collect();
        writeln!(f, "{hex}")
            .map_err(|e| ClusterError::Key(format!("cannot write {}: {e}", path.display())))
    }

    pub fn read(path: &Path) -> Result<Secret, ClusterError> {
        let bad = |why: String| ClusterError::Key(format!("{}: {why}", path.display()));
        let meta = std::fs::metadata(path).map_err(|e| bad(e.to_string()))?;
        if meta.permissions().mode() & 0o077 != 0 {
            tracing::warn!(
                "cluster key {} is readable by others (mode {:o}); chmod 600 it",
                path.display(),
                meta.permissions().mode() & 0o777
            );
        }
        // A key is 32 bytes in hex; a file much larger, or not a regular file at all (a FIFO
        // that blocks, /dev/zero that reads forever), is not one.
        let data =
            crate::files::read_regular(path, MAX_KEY_FILE).map_err(|e| bad(e.to_string()))?;
        let text =
            String::from_utf8(data).map_err(|_| bad("not a cluster key (not text)".into()))?;
        let hex = text.trim();
        if hex.len() % 2 != 0 || !hex.bytes().all(|c| c.is_ascii_hexdigit()) {
            return Err(bad(
                "not a cluster key (expected hex, as `vkml-node keygen` writes)".into(),
            ));
        }
        let bytes: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap_or(0))
            .collect();
        if bytes.len() < 16 {
            return Err(bad(format!(
                "a key needs at least 16 bytes, this one has {}",
                bytes.len()
            )));
        }
        Ok(Secret(bytes))
    }
}
