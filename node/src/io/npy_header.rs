//! The header of a .npy file: a Python dict literal such as
//! `{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }`.
//! Only the subset numpy writes is understood: strings, True/False, and tuples of integers.

use crate::tensor::DType;

#[derive(Debug, PartialEq)]
pub(crate) struct Header {
    pub descr: String,
    pub fortran_order: bool,
    pub shape: Vec<usize>,
}

enum Value {
    Str(String),
    Bool(bool),
    Tuple(Vec<usize>),
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn ws(&mut self) {
        while self.i < self.s.len() && self.s[self.i].is_ascii_whitespace() {
            self.i += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.s.get(self.i).copied()
    }

    fn eat(&mut self, c: u8) -> Result<(), String> {
        match self.peek() {
            Some(x) if x == c => {
                self.i += 1;
                Ok(())
            }
            Some(x) => Err(format!(
                "expected '{}' at byte {} of the header, found '{}'",
                c as char,
                self.i,
                x.escape_ascii()
            )),
            None => Err(format!("header ends where '{}' was expected", c as char)),
        }
    }

    fn string(&mut self) -> Result<String, String> {
        let q = match self.peek() {
            Some(q @ (b'\'' | b'"')) => q,
            _ => {
                return Err(format!(
                    "expected a string at byte {} of the header",
                    self.i
                ));
            }
        };
        self.i += 1;
        let start = self.i;
        while self.i < self.s.len() && self.s[self.i] != q {
            self.i += 1;
        }
        if self.i == self.s.len() {
            return Err("unterminated string in the header".into());
        }
        let text = String::from_utf8_lossy(&self.s[start..self.i]).into_owned();
        self.i += 1;
        Ok(text)
    }

    fn word(&mut self) -> &[u8] {
        self.ws();
        let start = self.i;
        while self.i < self.s.len() && (self.s[self.i].is_ascii_alphanumeric()) {
            self.i += 1;
        }
        &self.s[start..self.i]
    }

    fn value(&mut self) -> Result<Value, String> {
        match self.peek() {
            Some(b'\'' | b'"') => self.string().map(Value::Str),
            Some(b'(') => {
                self.i += 1;
                let mut dims = Vec::new();
                loop {
                    if self.peek() == Some(b')') {
                        self.i += 1;
                        break;
                    }
                    let w = self.word();
                    // Python 2 wrote long integers with an L suffix.
                    let digits = w.strip_suffix(b"L").unwrap_or(w);
                    let text = std::str::from_utf8(digits).unwrap_or("");
                    let d = text
                        .parse::<usize>()
                        .map_err(|_| format!("shape entry '{}' is not a size", w.escape_ascii()))?;
                    dims.push(d);
                    if self.peek() == Some(b',') {
                        self.i += 1;
                    } else {
                        self.eat(b')')?;
                        break;
                    }
                }
                Ok(Value::Tuple(dims))
            }
            Some(b'[') => Err("structured dtypes (a list as 'descr') are not supported".into()),
            _ => match self.word() {
                b"True" => Ok(Value::Bool(true)),
                b"False" => Ok(Value::Bool(false)),
                w => Err(format!(
                    "unexpected value '{}' in the header",
                    w.escape_ascii()
                )),
            },
        }
    }
}

/// Parses the header text. Errors say what is wrong, for a message naming the file.
pub(crate) fn parse(text: &[u8]) -> Result<Header, String> {
    let mut p = Parser { s: text, i: 0 };
    let (mut descr, mut fortran, mut shape) = (None, None, None);
    p.eat(b'{')?;
    loop {
        if p.peek() == Some(b'}') {
            p.i += 1;
            break;
        }
        let key = p.string()?;
        p.eat(b':')?;
        let value = p.value()?;
        match (key.as_str(), value) {
            ("descr", Value::Str(s)) => descr = Some(s),
            ("fortran_order", Value::Bool(b)) => fortran = Some(b),
            ("shape", Value::Tuple(t)) => shape = Some(t),
            ("descr" | "fortran_order" | "shape", _) => {
                return Err(format!("'{key}' has the wrong kind of value"));
            }
            // Unknown keys: numpy itself would refuse them, but they cannot change the data.
            _ => {}
        }
        if p.peek() == Some(b',') {
            p.i += 1;
        } else {
            p.eat(b'}')?;
            break;
        }
    }
    if p.peek().is_some() {
        return Err(format!(
            "unexpected text after the header's dict, at byte {}",
            p.i
        ));
    }
    Ok(Header {
        descr: descr.ok_or("the header has no 'descr'")?,
        fortran_order: fortran.ok_or("the header has no 'fortran_order'")?,
        shape: shape.ok_or("the header has no 'shape'")?,
    })
}

/// The DType of a numpy descriptor such as `<f4`, `|b1` or `<V2` (bfloat16 as ml_dtypes
/// saves it).
pub(crate) fn dtype_of(descr: &str) -> Result<DType, String> {
    let (order, code) = match descr.as_bytes().first() {
        Some(b'<' | b'>' | b'|' | b'=') => descr.split_at(1),
        _ => ("", descr),
    };
    let dtype = match code {
        "f2" => DType::F16,
        "f4" => DType::F32,
        "f8" => DType::F64,
        "i1" => DType::I8,
        "i2" => DType::I16,
        "i4" => DType::I32,
        "i8" => DType::I64,
        "u1" => DType::U8,
        "u2" => DType::U16,
        "u4" => DType::U32,
        "u8" => DType::U64,
        "b1" | "?" => DType::Bool,
        "V2" => DType::BF16,
        "V1" => {
            return Err(format!(
                "dtype '{descr}' is one raw byte an element (ml_dtypes' float8 and float4 types \
                 save so), which does not say which type; save the array as float32 (the model \
                 casts it) or as a .pb file"
            ));
        }
        _ => return Err(format!("dtype '{descr}' is not supported")),
    };
    if order == ">" && dtype.size() > 1 {
        return Err(format!(
            "dtype '{descr}' is big-endian; only little-endian data is supported \
             (convert with arr.astype(arr.dtype.newbyteorder('<')))"
        ));
    }
    Ok(dtype)
}

/// The header numpy (2.x) writes for a C-order array, with its preamble (magic, version,
/// length), padded so the data starts at a multiple of 64 bytes.
pub(crate) fn encode(dtype: DType, shape: &[usize]) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let tuple = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let mut dict = format!(
        "{{'descr': '{}', 'fortran_order': False, 'shape': {tuple}, }}",
        dtype.npy_descr()
    );
    // numpy leaves room for the first axis to grow to 21 digits, so that appending to a file
    // can rewrite the header in place; doing the same keeps our files byte-identical to its.
    if let Some(first) = dims.first() {
        dict.push_str(&" ".repeat(21usize.saturating_sub(first.len())));
    }
    // Version 1 has a 2-byte length; headers longer than that need version 2's 4 bytes.
    let v1_total = (10 + dict.len() + 1).next_multiple_of(64);
    let (version, preamble) = if v1_total - 10 <= u16::MAX as usize {
        (1u8, 10)
    } else {
        (2u8, 12)
    };
    let total = (preamble + dict.len() + 1).next_multiple_of(64);
    let hlen = total - preamble;
    let mut out = Vec::with_capacity(total);
    out.extend_from_slice(b"\x93NUMPY");
    out.extend_from_slice(&[version, 0]);
    if version == 1 {
        out.extend_from_slice(&(hlen as u16).to_le_bytes());
    } else {
        out.extend_from_slice(&(hlen as u32).to_le_bytes());
    }
    out.extend_from_slice(dict.as_bytes());
    out.resize(total - 1, b' ');
    out.push(b'\n');
    out
}
