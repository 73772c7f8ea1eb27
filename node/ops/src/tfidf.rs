//! TfIdfVectorizer (opset 9) on integer tokens: X [C] or [B, C] to Y [out] or [B, out] float,
//! counting in each row the n-grams of the pool (pool_int64s), contiguous or with up to
//! max_skip_count tokens skipped between their items, and weighting the counts (TF, IDF or
//! TFIDF). out = max(ngram_indexes) + 1. CPU only: counting is hashing, which the host does
//! best. String tokens (pool_strings) are not supported.

use std::collections::HashMap;

use super::util::req;
use super::{InferInput, NodeSpec, Op, OpError, Registry, ValueType};
use crate::tensor::{DType, Tensor};

pub fn register(r: &mut Registry) {
    r.add("TfIdfVectorizer", build);
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Weighting {
    Tf,
    Idf,
    TfIdf,
}

#[derive(Debug)]
struct TfIdf {
    weighting: Weighting,
    min_gram: usize,
    max_gram: usize,
    max_skip: usize,
    /// The pool's n-grams of the lengths counted, to their output column.
    pool: HashMap<Vec<i64>, usize>,
    columns: usize,
    /// Per output column; empty means all ones.
    weights: Vec<f32>,
}

fn int(spec: &NodeSpec<'_>, name: &str) -> Result<usize, OpError> {
    let v = spec.attrs.int_opt(name)?.ok_or_else(|| {
        OpError::invalid(format!(
            "TfIdfVectorizer needs the int attribute '{name}'; add it to the node"
        ))
    })?;
    usize::try_from(v)
        .map_err(|_| OpError::invalid(format!("TfIdfVectorizer: {name} is {v}, below 0")))
}

fn build(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    let a = spec.attrs;
    let weighting = match a.string_opt("mode")? {
        Some("TF") => Weighting::Tf,
        Some("IDF") => Weighting::Idf,
        Some("TFIDF") => Weighting::TfIdf,
        other => {
            return Err(OpError::invalid(format!(
                "TfIdfVectorizer mode {other:?} is not one of \"TF\", \"IDF\" and \"TFIDF\""
            )));
        }
    };
    let (min_gram, max_gram) = (int(spec, "min_gram_length")?, int(spec, "max_gram_length")?);
    let max_skip = int(spec, "max_skip_count")?;
    if min_gram == 0 || min_gram > max_gram {
        return Err(OpError::invalid(format!(
            "TfIdfVectorizer: min_gram_length {min_gram} and max_gram_length {max_gram} must \
             satisfy 1 <= min <= max"
        )));
    }
    if a.has("pool_strings") {
        return Err(OpError::unsupported(
            "TfIdfVectorizer on strings (pool_strings); map the tokens to integers first",
        ));
    }
    let pool = a.ints_opt("pool_int64s")?.unwrap_or_default();
    let counts = a.ints_opt("ngram_counts")?.unwrap_or_default();
    let indexes = a.ints_opt("ngram_indexes")?.ok_or_else(|| {
        OpError::invalid("TfIdfVectorizer needs the ints attribute 'ngram_indexes'")
    })?;
    let columns = indexes
        .iter()
        .map(|&i| usize::try_from(i).map(|i| i + 1))
        .try_fold(0, |m, i| i.map(|i| m.max(i)))
        .map_err(|_| OpError::invalid("TfIdfVectorizer: ngram_indexes has a negative entry"))?;
    let weights = a.floats_opt("weights")?.unwrap_or_default().to_vec();
    if !weights.is_empty() && weights.len() < columns {
        return Err(OpError::invalid(format!(
            "TfIdfVectorizer: weights has {} entries for {columns} output columns",
            weights.len()
        )));
    }
    let mut map = HashMap::new();
    // N-grams are numbered through the whole pool, lengths outside [min, max] included.
    let mut id = 0usize;
    for (k, &start) in counts.iter().enumerate() {
        let n = k + 1;
        let end = counts.get(k + 1).copied().unwrap_or(pool.len() as i64);
        let (Ok(start), Ok(end)) = (usize::try_from(start), usize::try_from(end)) else {
            return Err(OpError::invalid(
                "TfIdfVectorizer: ngram_counts has a negative entry",
            ));
        };
        if start > end || end > pool.len() {
            return Err(OpError::invalid(format!(
                "TfIdfVectorizer: ngram_counts {counts:?} do not split a pool of {} items",
                pool.len()
            )));
        }
        for gram in pool[start..end].chunks_exact(n) {
            if (min_gram..=max_gram).contains(&n) {
                let column = indexes.get(id).ok_or_else(|| {
                    OpError::invalid(format!(
                        "TfIdfVectorizer: the pool has more n-grams than ngram_indexes' {} \
                         entries",
                        indexes.len()
                    ))
                })?;
                // A repeated n-gram counts for its last place, as ONNX's reference has it.
                map.insert(gram.to_vec(), *column as usize);
            }
            id += 1;
        }
    }
    Ok(Box::new(TfIdf {
        weighting,
        min_gram,
        max_gram,
        max_skip,
        pool: map,
        columns,
        weights,
    }))
}

impl TfIdf {
    /// Counts one row's n-grams into `freq` (one entry per column). Unigrams count once;
    /// longer n-grams once per skip distance 1 ..= max_skip + 1 between their items.
    fn count(&self, row: &[i64], freq: &mut [u32]) {
        let mut shortest = self.min_gram;
        // No n-gram is longer than the row, nor skips past it: attributes far larger (a fuzzed
        // max_gram_length of 2^31) must cost nothing.
        let mut gram = Vec::with_capacity(self.max_gram.min(row.len()));
        let skips = self.max_skip.saturating_add(1).min(row.len().max(1));
        for skip in 1..=skips {
            for start in 0..row.len() {
                if start.saturating_add(skip.saturating_mul(shortest - 1)) >= row.len() {
                    break;
                }
                gram.clear();
                for n in 1..=self.max_gram {
                    let Some(&token) = row.get(start + (n - 1) * skip) else {
                        break;
                    };
                    gram.push(token);
                    if n >= shortest
                        && let Some(&c) = self.pool.get(&gram)
                    {
                        freq[c] += 1;
                    }
                }
            }
            if shortest == 1 {
                shortest = 2;
                if shortest > self.max_gram {
                    break;
                }
            }
        }
    }

    fn weigh(&self, column: usize, count: u32) -> f32 {
        let w = self.weights.get(column).copied().unwrap_or(1.0);
        match self.weighting {
            Weighting::Tf => count as f32,
            Weighting::Idf => {
                if count > 0 {
                    w
                } else {
                    0.0
                }
            }
            Weighting::TfIdf => count as f32 * w,
        }
    }
}

impl Op for TfIdf {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let x = req(inputs, 0)?.ty;
        if !matches!(x.dtype, DType::I32 | DType::I64) {
            return Err(OpError::unsupported(format!(
                "TfIdfVectorizer on {} tokens; it takes int32 or int64 (strings are not \
                 supported)",
                x.dtype
            )));
        }
        let shape = match x.shape[..] {
            [] | [_] => vec![self.columns],
            [b, _] => vec![b, self.columns],
            _ => {
                return Err(OpError::invalid(format!(
                    "TfIdfVectorizer: X must be [C] or [B, C], found {x}"
                )));
            }
        };
        Ok(vec![ValueType::new(DType::F32, shape)])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let x = req(inputs, 0)?;
        let tokens = x
            .to_i64_vec()
            .map_err(|e| OpError::invalid(format!("TfIdfVectorizer: {e}")))?;
        let width = match x.shape() {
            [_, c] => *c,
            _ => tokens.len(),
        };
        let rows = if x.rank() == 2 { x.shape()[0] } else { 1 };
        // The output's size was checked when planning, the counts' only through it: with no
        // rows, ngram_indexes may name a column far past any memory.
        if rows == 0 {
            return Ok(vec![Tensor::from_vec(
                outputs[0].shape.clone(),
                Vec::<f32>::new(),
            )]);
        }
        let mut y = vec![0.0f32; rows * self.columns];
        let mut freq = vec![0u32; self.columns];
        for r in 0..rows {
            freq.iter_mut().for_each(|f| *f = 0);
            self.count(&tokens[r * width..(r + 1) * width], &mut freq);
            let out = &mut y[r * self.columns..(r + 1) * self.columns];
            for (c, (o, &f)) in out.iter_mut().zip(&freq).enumerate() {
                *o = self.weigh(c, f);
            }
        }
        Ok(vec![Tensor::from_vec(outputs[0].shape.clone(), y)])
    }

    fn flops(&self, inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> u64 {
        let n = inputs.first().copied().flatten().map_or(0, |x| x.numel());
        let longest = self.max_gram.min(n);
        let skips = self.max_skip.saturating_add(1).min(n.max(1));
        n.saturating_mul(longest).saturating_mul(skips) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::AttrValue;
    use crate::testkit::{node, run1};

    fn vectorizer(mode: &str, min: i64, max: i64, skip: i64, weights: &[f32]) -> Box<dyn Op> {
        // The pool of ONNX's node tests: unigrams 2 3 5 4, bigrams 5 6, 7 8, 6 7; columns
        // 0 .. 6 in order.
        let mut attrs = vec![
            ("mode", AttrValue::String(mode.into())),
            ("min_gram_length", AttrValue::Int(min)),
            ("max_gram_length", AttrValue::Int(max)),
            ("max_skip_count", AttrValue::Int(skip)),
            ("ngram_counts", AttrValue::Ints(vec![0, 4])),
            ("ngram_indexes", AttrValue::Ints((0..7).collect())),
            (
                "pool_int64s",
                AttrValue::Ints(vec![2, 3, 5, 4, 5, 6, 7, 8, 6, 7]),
            ),
        ];
        if !weights.is_empty() {
            attrs.push(("weights", AttrValue::Floats(weights.to_vec())));
        }
        node("TfIdfVectorizer", 9, attrs, 1, 1).unwrap()
    }

    fn y(op: &dyn Op, x: &Tensor) -> Vec<f64> {
        run1(op, &[x]).unwrap().to_f64_vec().unwrap()
    }

    /// Expected values of ONNX's node tests (test_tfidfvectorizer_*), and by hand.
    #[test]
    fn onnx_node_test_numbers() {
        let x = Tensor::from_vec(vec![12], vec![1i32, 1, 3, 3, 3, 7, 8, 6, 7, 5, 6, 8]);
        // Bigrams only, no skip: 5 6 once, 7 8 once, 6 7 once.
        let op = vectorizer("TF", 2, 2, 0, &[]);
        assert_eq!(y(&*op, &x), [0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0]);
        // Up to 5 skips: 7 8 also as 7 _ _ _ _ 8 ... and 6 7 twice more.
        let op = vectorizer("TF", 2, 2, 5, &[]);
        assert_eq!(y(&*op, &x), [0.0, 0.0, 0.0, 0.0, 1.0, 3.0, 1.0]);
        let op = vectorizer("TF", 1, 2, 5, &[]);
        assert_eq!(y(&*op, &x), [0.0, 3.0, 1.0, 0.0, 1.0, 3.0, 1.0]);
        let batch = Tensor::from_vec(vec![2, 6], vec![1i64, 1, 3, 3, 3, 7, 8, 6, 7, 5, 6, 8]);
        let op = vectorizer("TF", 2, 2, 0, &[]);
        let want = [0., 0., 0., 0., 0., 0., 0., 0., 0., 0., 0., 1., 0., 1.];
        assert_eq!(y(&*op, &batch), want);
        let op = vectorizer("TF", 1, 2, 5, &[]);
        let want = [0., 3., 0., 0., 0., 0., 0., 0., 0., 1., 0., 1., 1., 1.];
        assert_eq!(y(&*op, &batch), want);
        // IDF keeps the weight of present n-grams; TFIDF multiplies (ONNX's reference gives
        // these).
        let w = [0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let op = vectorizer("IDF", 1, 2, 5, &w);
        assert_eq!(y(&*op, &x), [0.0, 1.0, 2.0, 0.0, 4.0, 5.0, 6.0]);
        let op = vectorizer("TFIDF", 1, 2, 5, &w);
        assert_eq!(y(&*op, &x), [0.0, 3.0, 2.0, 0.0, 4.0, 15.0, 6.0]);
    }

    /// A fuzz finding: a column index far past memory with no rows to count allocated its
    /// counts anyway (16 GiB) and aborted the process.
    #[test]
    fn no_rows_allocate_nothing_per_column() {
        let attrs = vec![
            ("mode", AttrValue::String("TF".into())),
            ("min_gram_length", AttrValue::Int(1)),
            ("max_gram_length", AttrValue::Int(1)),
            ("max_skip_count", AttrValue::Int(0)),
            ("ngram_counts", AttrValue::Ints(vec![0])),
            ("ngram_indexes", AttrValue::Ints(vec![1 << 32])),
            ("pool_int64s", AttrValue::Ints(vec![2])),
        ];
        let op = node("TfIdfVectorizer", 9, attrs, 1, 1).unwrap();
        let empty = Tensor::from_vec(vec![0, 3], Vec::<i64>::new());
        let y = run1(&*op, &[&empty]).unwrap();
        assert_eq!(y.shape(), [0, (1 << 32) + 1]);
    }

    /// Another: n-grams up to 2^31 items long, with skips up to 2^31, allocated and looped by
    /// those lengths rather than the row's. They count as the row allows: the bigrams of ONNX's
    /// pool, each once per skip distance that still fits in the row.
    #[test]
    fn huge_gram_and_skip_lengths_are_bounded_by_the_row() {
        let mut attrs = vec![
            ("mode", AttrValue::String("TF".into())),
            ("min_gram_length", AttrValue::Int(2)),
            ("max_gram_length", AttrValue::Int(i32::MAX as i64)),
            ("max_skip_count", AttrValue::Int(i32::MAX as i64)),
            ("ngram_counts", AttrValue::Ints(vec![0, 4])),
            ("ngram_indexes", AttrValue::Ints((0..7).collect())),
        ];
        attrs.push((
            "pool_int64s",
            AttrValue::Ints(vec![2, 3, 5, 4, 5, 6, 7, 8, 6, 7]),
        ));
        let op = node("TfIdfVectorizer", 9, attrs, 1, 1).unwrap();
        // Bigrams (5, 6) and (7, 8) at distance 1; (6, 7) at distance 1 and 3 (6 7 8 7).
        let x = Tensor::from_vec(vec![5], vec![5i64, 6, 7, 8, 7]);
        assert_eq!(y(&*op, &x), [0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 2.0]);
    }

    #[test]
    fn refusals() {
        let op = vectorizer("TF", 1, 2, 0, &[]);
        let f = Tensor::from_vec(vec![2], vec![1.0f32, 2.0]);
        assert!(run1(&*op, &[&f]).is_err());
        let r3 = Tensor::from_vec(vec![1, 1, 2], vec![1i64, 2]);
        assert!(run1(&*op, &[&r3]).is_err());
        let bad = vec![
            ("mode", AttrValue::String("BM25".into())),
            ("min_gram_length", AttrValue::Int(1)),
            ("max_gram_length", AttrValue::Int(1)),
            ("max_skip_count", AttrValue::Int(0)),
            ("ngram_indexes", AttrValue::Ints(vec![0])),
        ];
        assert!(node("TfIdfVectorizer", 9, bad, 1, 1).is_err());
    }
}
