//! The string ops: StringConcat, StringSplit, StringNormalizer and RegexFullMatch (CPU:
//! string tensors never reach a GPU). StringSplit and StringNormalizer make shapes that
//! depend on the text, so their rules ask for the input's value ([`OpError::NeedsValue`]).

use regex::Regex;

use super::elementwise::broadcast;
use super::util::{broadcast_shapes, req};
use super::{InferInput, NodeSpec, Op, OpError, Registry, ValueType};
use crate::tensor::{DType, Tensor, numel};

pub fn register(r: &mut Registry) {
    r.add("StringConcat", |_| Ok(Box::new(Concat)));
    r.add("StringSplit", Split::build);
    r.add("StringNormalizer", Normalizer::build);
    r.add("RegexFullMatch", FullMatch::build);
}

fn text<'a>(t: &'a Tensor, what: &str) -> Result<Vec<&'a str>, OpError> {
    t.strings().map_err(|_| {
        OpError::invalid(format!(
            "{what} must be a string tensor, found {}",
            t.dtype()
        ))
    })
}

fn string_input<'a>(
    inputs: &[Option<InferInput<'a>>],
    i: usize,
    op: &str,
) -> Result<InferInput<'a>, OpError> {
    let x = req(inputs, i)?;
    if x.ty.dtype != DType::String {
        return Err(OpError::invalid(format!(
            "{op} takes string tensors, found {}",
            x.ty.dtype
        )));
    }
    Ok(x)
}

/// Elementwise concatenation, broadcast as numpy does.
#[derive(Debug)]
struct Concat;

impl Op for Concat {
    fn strings(&self) -> bool {
        true
    }

    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let a = string_input(inputs, 0, "StringConcat")?.ty;
        let b = string_input(inputs, 1, "StringConcat")?.ty;
        let out = broadcast_shapes(&a.shape, &b.shape).map_err(|_| {
            OpError::invalid(format!(
                "StringConcat: shapes {:?} and {:?} cannot be broadcast together",
                a.shape, b.shape
            ))
        })?;
        Ok(vec![ValueType::new(DType::String, out)])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let (a, b) = (req(inputs, 0)?, req(inputs, 1)?);
        let (x, y) = (text(a, "X")?, text(b, "Y")?);
        let out = &outputs[0].shape;
        let joined: Vec<String> =
            broadcast::binary(&x, a.shape(), &y, b.shape(), out, |p, q| (p, q))
                .into_iter()
                .map(|(p, q)| format!("{p}{q}"))
                .collect();
        Ok(vec![Tensor::from_strings(out.clone(), &joined)])
    }
}

/// Splits each string at a delimiter (runs of whitespace when none is given, as Python's
/// `str.split()`), at most `maxsplit` times; Y pads with "" to the most pieces, Z counts them.
#[derive(Debug)]
struct Split {
    delimiter: Option<String>,
    maxsplit: Option<usize>,
}

impl Split {
    fn build(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
        let delimiter = spec
            .attrs
            .string_opt("delimiter")?
            .filter(|d| !d.is_empty());
        let maxsplit = spec.attrs.int_opt("maxsplit")?.filter(|&m| m >= 0);
        Ok(Box::new(Split {
            delimiter: delimiter.map(str::to_string),
            maxsplit: maxsplit.map(|m| m as usize),
        }))
    }

    fn pieces<'a>(&self, s: &'a str) -> Vec<&'a str> {
        let limit = self.maxsplit.map_or(usize::MAX, |m| m.saturating_add(1));
        match &self.delimiter {
            Some(d) => s.splitn(limit, d.as_str()).collect(),
            None => {
                // Python's whitespace split: leading whitespace skipped, and the last piece
                // (after maxsplit splits) keeps its inner whitespace but loses leading runs.
                let mut out = Vec::new();
                let mut rest = s.trim_start();
                while !rest.is_empty() {
                    if out.len() + 1 == limit {
                        out.push(rest.trim_end());
                        break;
                    }
                    let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
                    out.push(&rest[..end]);
                    rest = rest[end..].trim_start();
                }
                out
            }
        }
    }
}

impl Op for Split {
    fn strings(&self) -> bool {
        true
    }

    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let x = string_input(inputs, 0, "StringSplit")?;
        let Some(v) = x.value else {
            // How many pieces the longest split has decides Y's last axis.
            return Err(OpError::NeedsValue(0));
        };
        let most = text(v, "X")?
            .iter()
            .map(|s| self.pieces(s).len())
            .max()
            .unwrap_or(0);
        let mut y = x.ty.shape.clone();
        y.push(most);
        Ok(vec![
            ValueType::new(DType::String, y),
            ValueType::new(DType::I64, x.ty.shape.clone()),
        ])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let x = text(req(inputs, 0)?, "X")?;
        let most = *outputs[0].shape.last().unwrap_or(&0);
        let mut y: Vec<&str> = Vec::with_capacity(x.len() * most);
        let mut z = Vec::with_capacity(x.len());
        for s in &x {
            let p = self.pieces(s);
            z.push(p.len() as i64);
            y.extend(p.iter().copied().chain(std::iter::repeat("")).take(most));
        }
        Ok(vec![
            Tensor::from_strings(outputs[0].shape.clone(), &y),
            Tensor::from_vec(outputs[1].shape.clone(), z),
        ])
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Case {
    Lower,
    Upper,
    Keep,
}

/// Changes case and drops stop words (whole space-separated words, matched before or
/// after the case change as `is_case_sensitive` says); strings left empty are dropped, all
/// of them leaving one "".
#[derive(Debug)]
struct Normalizer {
    case: Case,
    sensitive: bool,
    stopwords: Vec<String>,
}

impl Normalizer {
    fn build(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
        let a = spec.attrs;
        let case = match a.string("case_change_action", "NONE")? {
            "LOWER" => Case::Lower,
            "UPPER" => Case::Upper,
            "NONE" => Case::Keep,
            other => {
                return Err(OpError::invalid(format!(
                    "case_change_action '{other}': it is LOWER, UPPER or NONE"
                )));
            }
        };
        Ok(Box::new(Normalizer {
            case,
            sensitive: a.int("is_case_sensitive", 0)? != 0,
            stopwords: a.strings_opt("stopwords")?.unwrap_or(&[]).to_vec(),
        }))
    }

    fn change(&self, s: &str) -> String {
        match self.case {
            Case::Lower => s.to_lowercase(),
            Case::Upper => s.to_uppercase(),
            Case::Keep => s.to_string(),
        }
    }

    fn drop_stops(s: &str, stops: &[String]) -> String {
        s.split(' ')
            .filter(|w| !stops.iter().any(|x| x == w))
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn normalize(&self, x: &[&str]) -> Vec<String> {
        let out: Vec<String> = if self.sensitive {
            x.iter()
                .map(|s| self.change(&Self::drop_stops(s, &self.stopwords)))
                .collect()
        } else {
            let stops: Vec<String> = self.stopwords.iter().map(|w| self.change(w)).collect();
            x.iter()
                .map(|s| Self::drop_stops(&self.change(s), &stops))
                .collect()
        };
        let kept: Vec<String> = out.into_iter().filter(|s| !s.is_empty()).collect();
        if kept.is_empty() {
            vec![String::new()]
        } else {
            kept
        }
    }
}

impl Op for Normalizer {
    fn strings(&self) -> bool {
        true
    }

    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let x = string_input(inputs, 0, "StringNormalizer")?;
        let rank2 = match x.ty.shape.as_slice() {
            [_] => false,
            [1, _] => true,
            s => {
                return Err(OpError::invalid(format!(
                    "StringNormalizer takes [C] or [1, C], found {s:?}"
                )));
            }
        };
        let Some(v) = x.value else {
            // Dropped stop words and empty strings decide the output's length.
            return Err(OpError::NeedsValue(0));
        };
        let n = self.normalize(&text(v, "X")?).len();
        let shape = if rank2 { vec![1, n] } else { vec![n] };
        Ok(vec![ValueType::new(DType::String, shape)])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let out = self.normalize(&text(req(inputs, 0)?, "X")?);
        Ok(vec![Tensor::from_strings(outputs[0].shape.clone(), &out)])
    }
}

/// Whether each whole string matches `pattern` (RE2 syntax, which the regex crate follows).
#[derive(Debug)]
struct FullMatch {
    re: Regex,
}

impl FullMatch {
    fn build(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
        let pattern = spec
            .attrs
            .string_opt("pattern")?
            .ok_or_else(|| OpError::invalid("RegexFullMatch has no 'pattern'"))?;
        let re = Regex::new(&format!("^(?:{pattern})$"))
            .map_err(|e| OpError::invalid(format!("RegexFullMatch pattern '{pattern}': {e}")))?;
        Ok(Box::new(FullMatch { re }))
    }
}

impl Op for FullMatch {
    fn strings(&self) -> bool {
        true
    }

    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let x = string_input(inputs, 0, "RegexFullMatch")?;
        Ok(vec![ValueType::new(DType::Bool, x.ty.shape.clone())])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let x = text(req(inputs, 0)?, "X")?;
        debug_assert_eq!(numel(&outputs[0].shape), x.len());
        let m = x.iter().map(|s| self.re.is_match(s)).collect();
        Ok(vec![Tensor::from_bools(outputs[0].shape.clone(), m)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Attrs;
    use crate::attrs::AttrValue;

    fn run(op: &str, attrs: Vec<(&str, AttrValue)>, xs: &[Tensor]) -> Vec<Tensor> {
        let attrs = Attrs(attrs.into_iter().map(|(k, v)| (k.into(), v)).collect());
        let spec = NodeSpec {
            name: "s",
            op_type: op,
            attrs: &attrs,
            opset: 20,
            num_inputs: xs.len(),
            num_outputs: 2,
        };
        let o = crate::build(&spec).unwrap();
        let tys: Vec<ValueType> = xs.iter().map(ValueType::of).collect();
        let ins: Vec<Option<InferInput<'_>>> = tys
            .iter()
            .zip(xs)
            .map(|(ty, v)| Some(InferInput { ty, value: Some(v) }))
            .collect();
        let out = o.infer(&ins).unwrap();
        let args: Vec<Option<&Tensor>> = xs.iter().map(Some).collect();
        o.run_cpu(&args, &out).unwrap()
    }

    fn s(shape: Vec<usize>, v: &[&str]) -> Tensor {
        Tensor::from_strings(shape, v)
    }

    #[test]
    fn concat_broadcasts() {
        let y = run(
            "StringConcat",
            vec![],
            &[s(vec![2, 1], &["a", "é"]), s(vec![3], &["x", "", "zz"])],
        );
        assert_eq!(y[0].shape(), &[2, 3]);
        assert_eq!(
            y[0].strings().unwrap(),
            ["ax", "a", "azz", "éx", "é", "ézz"]
        );
    }

    #[test]
    fn split_pads_to_the_most_pieces() {
        let x = s(vec![3], &["  a b  c ", "", "one"]);
        let y = run("StringSplit", vec![], std::slice::from_ref(&x));
        assert_eq!(y[0].shape(), &[3, 3]);
        assert_eq!(
            y[0].strings().unwrap(),
            ["a", "b", "c", "", "", "", "one", "", ""]
        );
        assert_eq!(y[1].to_i64_vec().unwrap(), vec![3, 0, 1]);
        let y = run(
            "StringSplit",
            vec![
                ("delimiter", AttrValue::String("-".into())),
                ("maxsplit", AttrValue::Int(1)),
            ],
            &[s(vec![2], &["a-b-c", "--"])],
        );
        assert_eq!(y[0].strings().unwrap(), ["a", "b-c", "", "-"]);
        assert_eq!(y[1].to_i64_vec().unwrap(), vec![2, 2]);
        let y = run(
            "StringSplit",
            vec![("maxsplit", AttrValue::Int(1))],
            &[s(vec![1], &[" a  b c "])],
        );
        assert_eq!(y[0].strings().unwrap(), ["a", "b c"]);
    }

    #[test]
    fn normalizer_drops_stop_words_and_changes_case() {
        let attrs = || {
            vec![
                ("case_change_action", AttrValue::String("UPPER".into())),
                ("stopwords", AttrValue::Strings(vec!["monday".into()])),
            ]
        };
        let x = s(vec![1, 3], &["Monday", "tuesday", "monday"]);
        let y = run("StringNormalizer", attrs(), std::slice::from_ref(&x));
        // Case-insensitive: both Mondays go.
        assert_eq!(y[0].shape(), &[1, 1]);
        assert_eq!(y[0].strings().unwrap(), ["TUESDAY"]);
        let mut sensitive = attrs();
        sensitive.push(("is_case_sensitive", AttrValue::Int(1)));
        let y = run("StringNormalizer", sensitive, &[x]);
        assert_eq!(y[0].strings().unwrap(), ["MONDAY", "TUESDAY"]);
        let y = run("StringNormalizer", attrs(), &[s(vec![1], &["monday"])]);
        assert_eq!(y[0].strings().unwrap(), [""]);
    }

    #[test]
    fn full_match_anchors_the_pattern() {
        let pattern = ("pattern", AttrValue::String(r"[a-z]+@\w+\.com".into()));
        let x = s(vec![3], &["me@x.com", "me@x.com.au", "ME@x.com"]);
        let y = run("RegexFullMatch", vec![pattern], &[x]);
        assert_eq!(y[0].view_bool().unwrap(), vec![true, false, false]);
    }
}
