//! Node names: a node's identity within the cluster, printed in every other node's logs and
//! carried in every gossip packet. So a name is short (it must fit beside the others in a
//! 1100-byte gossip packet), printable without escaping (a newline would forge log lines),
//! and unique (two nodes with one name would merge into one member in everyone's table).

/// The longest name, in bytes (a DNS label's limit).
pub const MAX_NAME: usize = 63;

/// Why `name` cannot name a node, if it cannot: 1 to 63 ASCII letters, digits, '-', '_' or
/// '.', starting with a letter or a digit (host names qualify).
pub fn check(name: &str) -> Result<(), String> {
    let shown = show(name);
    if name.is_empty() {
        return Err("a node name cannot be empty".into());
    }
    if name.len() > MAX_NAME {
        return Err(format!(
            "node name {shown} is {} bytes long; at most {MAX_NAME}",
            name.len()
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
    {
        return Err(format!(
            "node name {shown} has the character {c:?}; use letters, digits, '-', '_' and '.'"
        ));
    }
    if !name.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        return Err(format!(
            "node name {shown} must start with a letter or a digit"
        ));
    }
    Ok(())
}

/// A name as an error message may print it: escaped, and cut when long.
pub fn show(name: &str) -> String {
    const SHOWN: usize = 40;
    if name.chars().count() <= SHOWN {
        format!("{name:?}")
    } else {
        let head: String = name.chars().take(SHOWN).collect();
        format!("{head:?}... ({} characters)", name.chars().count())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_names_pass_and_forgeries_do_not() {
        for ok in ["n1", "gpu-box-3.example.com", "A_b-9", &"x".repeat(63)] {
            assert_eq!(check(ok), Ok(()), "{ok}");
        }
        assert_eq!(
            check("n1\n2026-11-24 INFO member n2 is dead").unwrap_err(),
            "node name \"n1\\n2026-11-24 INFO member n2 is dead\" has the character '\\n'; use \
             letters, digits, '-', '_' and '.'"
        );
        assert_eq!(
            check(&"y".repeat(5000)).unwrap_err(),
            format!(
                "node name {:?}... (5000 characters) is 5000 bytes long; at most 63",
                "y".repeat(40)
            )
        );
        assert!(check("").is_err());
        assert!(check("-n1").is_err());
        assert!(check("n 1").is_err());
        assert!(check("nœud").is_err());
    }
}
