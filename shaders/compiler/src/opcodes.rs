//! The op-code table (`opcodes.toml` in a shaders folder): the codes a shader switches on,
//! written once and emitted twice, as `#define`s for the shaders' `case` labels (the include
//! `opcodes.glsl`) and as Rust enums, so the two sides cannot drift apart.
//!
//! ```toml
//! [Binary]                       # the Rust enum
//! doc = "`op` of binary.comp"
//! prefix = "BIN"                 # #define BIN_ADD 0u, BIN_PRELU 7u, ...
//! [Binary.codes]
//! Add = 0
//! PRelu = { code = 7, doc = "y = x < 0 ? x * slope : x" }
//! ```
//!
//! A code's GLSL name is the prefix, `_`, and its Rust name in capitals with `_` where a
//! capital follows a lowercase letter or digit (`PRelu` -> `BIN_PRELU`, `LogSumExp` ->
//! `RED_LOG_SUM_EXP`), unless the code gives its own: `IsNaN = { code = 40, glsl = "IS_NAN" }`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde::Deserialize;

use crate::names::{is_camel_ident, rust_string};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EnumSpec {
    doc: String,
    prefix: String,
    codes: BTreeMap<String, CodeSpec>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum CodeSpec {
    Bare(u32),
    Documented {
        code: u32,
        doc: Option<String>,
        /// The GLSL name after the prefix, where the rule below reads badly.
        glsl: Option<String>,
    },
}

/// One enum of the table, its codes in ascending order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpEnum {
    pub name: String,
    pub doc: String,
    pub prefix: String,
    pub codes: Vec<Code>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Code {
    pub name: String,
    pub glsl: String,
    pub value: u32,
    pub doc: Option<String>,
}

/// Parses and checks the table; `file` names it in messages.
pub fn parse(file: &str, text: &str) -> Result<Vec<OpEnum>, String> {
    let specs: BTreeMap<String, EnumSpec> =
        toml::from_str(text).map_err(|e| format!("{file}: {e}"))?;
    let mut out = Vec::new();
    let mut defines = BTreeSet::new();
    for (name, spec) in specs {
        let bad = |what: String| Err(format!("{file}: [{name}]: {what}"));
        if !is_camel_ident(&name) {
            return bad("an enum name must be CamelCase letters and digits".into());
        }
        if spec.prefix.is_empty()
            || !spec.prefix.starts_with(|c: char| c.is_ascii_uppercase())
            || !spec
                .prefix
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
        {
            return bad(format!(
                "prefix '{}' must be capitals, digits and '_'",
                spec.prefix
            ));
        }
        if spec.codes.is_empty() {
            return bad("no codes".into());
        }
        let mut codes = Vec::new();
        for (code_name, c) in spec.codes {
            if !is_camel_ident(&code_name) {
                return bad(format!(
                    "code name '{code_name}' must be CamelCase letters and digits"
                ));
            }
            let (value, doc, glsl) = match c {
                CodeSpec::Bare(v) => (v, None, None),
                CodeSpec::Documented { code, doc, glsl } => (code, doc, glsl),
            };
            let glsl = glsl.unwrap_or_else(|| screaming(&code_name));
            if !glsl
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
            {
                return bad(format!(
                    "GLSL name '{glsl}' must be capitals, digits and '_'"
                ));
            }
            let glsl = format!("{}_{glsl}", spec.prefix);
            if !defines.insert(glsl.clone()) {
                return bad(format!(
                    "{glsl} is defined twice: give the enums different prefixes"
                ));
            }
            codes.push(Code {
                name: code_name,
                glsl,
                value,
                doc,
            });
        }
        codes.sort_by_key(|c| c.value);
        for pair in codes.windows(2) {
            if pair[0].value == pair[1].value {
                return bad(format!(
                    "{} and {} share the code {}: each code needs its own value",
                    pair[0].name, pair[1].name, pair[0].value
                ));
            }
        }
        out.push(OpEnum {
            name,
            doc: spec.doc,
            prefix: spec.prefix,
            codes,
        });
    }
    Ok(out)
}

/// `LogSumExp` -> `LOG_SUM_EXP`, `PRelu` -> `PRELU`.
fn screaming(name: &str) -> String {
    let mut s = String::new();
    let mut prev_lower = false;
    for c in name.chars() {
        if c.is_ascii_uppercase() && prev_lower {
            s.push('_');
        }
        prev_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
        s.push(c.to_ascii_uppercase());
    }
    s
}

/// The text of `opcodes.glsl`.
pub fn glsl(enums: &[OpEnum]) -> String {
    let mut s = String::from(
        "// Generated by vkml-shaderc from opcodes.toml: edit that table, not this text.\n\
         #ifndef VKML_OPCODES_GLSL\n#define VKML_OPCODES_GLSL\n",
    );
    for e in enums {
        writeln!(s, "\n// {}: {}", e.name, e.doc.replace('\n', "\n// ")).unwrap();
        for c in &e.codes {
            writeln!(s, "#define {} {}u", c.glsl, c.value).unwrap();
        }
    }
    s.push_str("\n#endif\n");
    s
}

/// The Rust module `op`, one enum per table entry.
pub fn rust(enums: &[OpEnum]) -> String {
    let mut s = String::from(
        "/// The codes shaders switch on, from the folder's opcodes.toml (the shaders see them as \
         the `#define`s of `opcodes.glsl`).\npub mod op {\n",
    );
    for e in enums {
        rust_enum(&mut s, e);
    }
    s.push_str("}\n");
    s
}

fn rust_enum(s: &mut String, e: &OpEnum) {
    let name = &e.name;
    let n = e.codes.len();
    writeln!(s, "    #[doc = {}]", rust_string(&e.doc)).unwrap();
    s.push_str(
        "    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]\n    \
         #[repr(u32)]\n",
    );
    writeln!(s, "    pub enum {name} {{").unwrap();
    for c in &e.codes {
        if let Some(doc) = &c.doc {
            writeln!(s, "        #[doc = {}]", rust_string(doc)).unwrap();
        }
        writeln!(s, "        {} = {},", c.name, c.value).unwrap();
    }
    s.push_str("    }\n\n");
    writeln!(s, "    impl {name} {{").unwrap();
    writeln!(s, "        pub const ALL: [{name}; {n}] = [").unwrap();
    for c in &e.codes {
        writeln!(s, "            {name}::{},", c.name).unwrap();
    }
    s.push_str("        ];\n\n");
    s.push_str(
        "        /// The value the shader's parameter carries.\n        \
         pub const fn code(self) -> u32 {\n            self as u32\n        }\n\n",
    );
    writeln!(
        s,
        "        pub const fn from_code(code: u32) -> Option<{name}> {{\n            \
         Some(match code {{"
    )
    .unwrap();
    for c in &e.codes {
        writeln!(s, "                {} => {name}::{},", c.value, c.name).unwrap();
    }
    s.push_str("                _ => return None,\n            })\n        }\n\n");
    s.push_str(
        "        /// The shaders' name for the code, for messages.\n        \
         pub const fn glsl_name(self) -> &'static str {\n            match self {\n",
    );
    for c in &e.codes {
        writeln!(s, "                {name}::{} => \"{}\",", c.name, c.glsl).unwrap();
    }
    s.push_str("            }\n        }\n    }\n\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = r#"
        [Binary]
        doc = "binary op"
        prefix = "BIN"
        [Binary.codes]
        Sub = 1
        Add = 0
        PRelu = { code = 7, doc = "leaky" }
        [Reduce]
        doc = "reduce op"
        prefix = "RED"
        [Reduce.codes]
        LogSumExp = 8
        IsNaN = { code = 9, glsl = "IS_NAN" }
    "#;

    #[test]
    fn codes_sort_by_value_and_get_glsl_names() {
        let enums = parse("t.toml", TABLE).unwrap();
        assert_eq!(enums.len(), 2);
        let names: Vec<_> = enums[0].codes.iter().map(|c| c.glsl.as_str()).collect();
        assert_eq!(names, ["BIN_ADD", "BIN_SUB", "BIN_PRELU"]);
        assert_eq!(enums[0].codes[2].doc.as_deref(), Some("leaky"));
        let names: Vec<_> = enums[1].codes.iter().map(|c| c.glsl.as_str()).collect();
        assert_eq!(names, ["RED_LOG_SUM_EXP", "RED_IS_NAN"]);
        let text = glsl(&enums);
        assert!(text.contains("#define BIN_PRELU 7u\n"));
        assert!(text.contains("#define RED_LOG_SUM_EXP 8u\n"));
        let code = rust(&enums);
        assert!(code.contains("PRelu = 7,"));
        assert!(code.contains("8 => Reduce::LogSumExp,"));
    }

    #[test]
    fn duplicate_codes_and_defines_are_refused() {
        let dup = "[A]\ndoc = \"\"\nprefix = \"A\"\n[A.codes]\nX = 1\nY = 1\n";
        let e = parse("t.toml", dup).unwrap_err();
        assert!(e.contains("share the code 1"), "{e}");
        let clash = "[A]\ndoc = \"\"\nprefix = \"P\"\n[A.codes]\nX = 1\n\
                     [B]\ndoc = \"\"\nprefix = \"P\"\n[B.codes]\nX = 2\n";
        let e = parse("t.toml", clash).unwrap_err();
        assert!(e.contains("P_X is defined twice"), "{e}");
        let bad = "[A]\ndoc = \"\"\nprefix = \"p\"\n[A.codes]\nX = 1\n";
        assert!(parse("t.toml", bad).unwrap_err().contains("prefix"));
        let unknown = "[A]\ndoc = \"\"\nprefix = \"P\"\nextra = 1\n[A.codes]\nX = 1\n";
        assert!(parse("t.toml", unknown).is_err());
    }
}
