//! Turning shader-side names into Rust identifiers.

/// Rust's keywords (2024 edition, reserved ones included): a shader name that is one is
/// written as a raw identifier (`r#where`).
const KEYWORDS: &[&str] = &[
    "abstract", "as", "async", "await", "become", "box", "break", "const", "continue", "crate",
    "do", "dyn", "else", "enum", "extern", "false", "final", "fn", "for", "gen", "if", "impl",
    "in", "let", "loop", "macro", "match", "mod", "move", "mut", "override", "priv", "pub", "ref",
    "return", "self", "Self", "static", "struct", "super", "trait", "true", "try", "type",
    "typeof", "unsafe", "unsized", "use", "virtual", "where", "while", "yield",
];

/// Keywords that cannot be raw identifiers either.
const NOT_RAW: &[&str] = &["crate", "self", "Self", "super", "_"];

/// `name` as a Rust identifier, or an error saying why it cannot be one.
pub fn rust_ident(name: &str) -> Result<String, String> {
    let plain = name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !plain || NOT_RAW.contains(&name) {
        return Err(format!("'{name}' cannot be a Rust identifier"));
    }
    Ok(if KEYWORDS.contains(&name) {
        format!("r#{name}")
    } else {
        name.to_string()
    })
}

/// A variant suffix as an enum variant: `cmp_f32` -> `CmpF32`, `a8_wide_bf16` -> `A8WideBf16`.
/// Digits on both sides of a `_` keep it (`f32_1` -> `F32_1`), and a leading digit gets a `V`,
/// so distinct suffixes stay distinct and every result is an identifier.
pub fn camel(suffix: &str) -> String {
    let mut s = String::new();
    for word in suffix.split('_').filter(|w| !w.is_empty()) {
        let digit_meets_digit = s.ends_with(|c: char| c.is_ascii_digit())
            && word.starts_with(|c: char| c.is_ascii_digit());
        if digit_meets_digit {
            s.push('_');
        }
        let mut chars = word.chars();
        if let Some(first) = chars.next() {
            s.push(first.to_ascii_uppercase());
            s.extend(chars);
        }
    }
    if s.starts_with(|c: char| c.is_ascii_digit()) {
        s.insert(0, 'V');
    }
    s
}

/// True for a CamelCase identifier: a capital, then letters and digits.
pub fn is_camel_ident(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_uppercase())
        && name.chars().all(|c| c.is_ascii_alphanumeric())
        && !KEYWORDS.contains(&name)
}

/// A Rust string literal holding `s`.
pub fn rust_string(s: &str) -> String {
    // Debug's escapes (\", \\, \n, \u{..}) are all valid in a Rust literal.
    format!("{s:?}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suffixes_become_distinct_variants() {
        assert_eq!(camel("f32"), "F32");
        assert_eq!(camel("cmp_u64"), "CmpU64");
        assert_eq!(camel("a8_wide_bf16"), "A8WideBf16");
        assert_eq!(camel("f32_1"), "F32_1");
        assert_eq!(camel("f321"), "F321");
        assert_eq!(camel("8bit"), "V8bit");
    }

    #[test]
    fn keywords_become_raw_identifiers() {
        assert_eq!(rust_ident("where").unwrap(), "r#where");
        assert_eq!(rust_ident("binary").unwrap(), "binary");
        assert!(rust_ident("self").is_err());
        assert!(rust_ident("2x").is_err());
    }
}
