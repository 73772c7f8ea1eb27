//! How a decoder-only language model's ONNX export names its inputs and outputs, found from
//! the declarations: the token ids, the attention mask and positions where the graph takes
//! them, the logits, and each layer's cache as a (past input, present output) pair that one
//! step's outputs feed to the next step's inputs.
//!
//! Optimum (torch) exports and ONNX Runtime GenAI's model builder both name the pairs
//! `past_key_values.N.key|value` -> `present.N.key|value`; a few exporters write
//! `past.N.key` or `present_key_values.N.key`, which are taken too.

use crate::model::{Dim, ValueDef};
use crate::tensor::DType;

use super::GenerateError;

/// One layer's key or value cache: fed as `past`, returned as `present`.
#[derive(Debug, Clone, PartialEq)]
pub struct CachePair {
    pub past: String,
    pub present: String,
    pub dtype: DType,
    /// [batch, heads, past length, head size] as declared (the batch and length symbolic).
    pub heads: usize,
    pub head_size: usize,
}

/// The roles of a model's inputs and outputs.
#[derive(Debug, Clone, PartialEq)]
pub struct LlmIo {
    pub input_ids: String,
    pub ids_dtype: DType,
    pub attention_mask: Option<(String, DType)>,
    pub position_ids: Option<(String, DType)>,
    pub logits: String,
    /// In layer order, key before value.
    pub caches: Vec<CachePair>,
    pub shared_cache: SharedCache,
    /// Where the model takes the row each step's cache rows go to: a model whose growing
    /// caches were rewritten to stay in place ([`super::window`]). The loop then places the
    /// prompt at the end of the buffer and each later token in the free rows from its start.
    pub write_index: Option<String>,
}

/// (layer, "key" | "value") of a cache name with one of `prefixes`.
pub(super) fn cache_slot<'a>(name: &'a str, prefixes: &[&str]) -> Option<(usize, &'a str)> {
    let rest = prefixes.iter().find_map(|p| name.strip_prefix(p))?;
    let (layer, kind) = rest.split_once('.')?;
    let layer = layer.parse().ok()?;
    matches!(kind, "key" | "value").then_some((layer, kind))
}

pub(super) const PAST: &[&str] = &["past_key_values.", "past."];
pub(super) const PRESENT: &[&str] = &["present.", "present_key_values."];

fn int_dtype(d: &ValueDef, what: &str) -> Result<DType, GenerateError> {
    match d.dtype {
        Some(t @ (DType::I64 | DType::I32)) => Ok(t),
        other => Err(GenerateError::Model(format!(
            "{what} '{}' must be int64 or int32, the model declares {}",
            d.name,
            other.map_or("no type".to_string(), |t| t.to_string())
        ))),
    }
}

/// Cache sizes a model's config gives, for caches whose declared shape leaves them symbolic
/// (the GenAI builder declares the head size as `kv_cache_dim`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheHints {
    /// Key/value heads.
    pub heads: Option<usize>,
    pub head_size: Option<usize>,
    /// Past and present share one buffer (GenAI's `past_present_share_buffer`).
    pub shared: bool,
}

/// Whether a model's past and present caches are one buffer, allocated once at the sequence's
/// greatest length (the present is the past with the new rows written at the sequence's
/// length; the attention mask spans the buffer), or the present is the past plus the new rows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SharedCache {
    /// The present grows by the rows fed.
    #[default]
    No,
    /// Shared, as long as the sequence asks for.
    Yes,
    /// Shared, of the length the model declares.
    Fixed(usize),
}

impl LlmIo {
    /// Finds the roles; an input it does not know, or a cache without its pair, is an error
    /// naming it (the loop could not feed it).
    pub fn detect(inputs: &[ValueDef], outputs: &[ValueDef]) -> Result<LlmIo, GenerateError> {
        LlmIo::detect_with(inputs, outputs, &CacheHints::default())
    }

    /// [`LlmIo::detect`], taking cache sizes the declarations leave symbolic from `hints`
    /// ([`super::ModelFolder`] reads them from the folder's config).
    pub fn detect_with(
        inputs: &[ValueDef],
        outputs: &[ValueDef],
        hints: &CacheHints,
    ) -> Result<LlmIo, GenerateError> {
        let find_in = |n: &str| inputs.iter().find(|d| d.name == n);
        let ids = find_in("input_ids").ok_or_else(|| {
            GenerateError::Model(format!(
                "no 'input_ids' input: not a language model export this loop knows (inputs: {})",
                names(inputs)
            ))
        })?;
        let logits = outputs.iter().find(|d| d.name == "logits").ok_or_else(|| {
            GenerateError::Model(format!("no 'logits' output (outputs: {})", names(outputs)))
        })?;
        let mut io = LlmIo {
            input_ids: ids.name.clone(),
            ids_dtype: int_dtype(ids, "input")?,
            attention_mask: None,
            position_ids: None,
            logits: logits.name.clone(),
            caches: Vec::new(),
            shared_cache: if hints.shared {
                SharedCache::Yes
            } else {
                SharedCache::No
            },
            write_index: None,
        };
        let mut slots = Vec::new();
        for d in inputs {
            match d.name.as_str() {
                "input_ids" => {}
                "attention_mask" => {
                    io.attention_mask = Some((d.name.clone(), int_dtype(d, "input")?));
                }
                "position_ids" => io.position_ids = Some((d.name.clone(), int_dtype(d, "input")?)),
                super::window::WRITE_INDEX => io.write_index = Some(d.name.clone()),
                n => {
                    let (layer, kind) = cache_slot(n, PAST).ok_or_else(|| {
                        GenerateError::Model(format!(
                            "input '{n}' is neither the tokens, the mask, the positions nor a \
                             past key/value cache: this loop cannot feed it"
                        ))
                    })?;
                    let (pair, fixed) = cache_pair(d, layer, kind, outputs, hints)?;
                    if let Some(n) = fixed {
                        match io.shared_cache {
                            SharedCache::Fixed(m) if m != n => {
                                return Err(GenerateError::Model(format!(
                                    "cache input '{}' is {n} long where another is {m}: \
                                     caches of one buffer length expected",
                                    d.name
                                )));
                            }
                            _ => io.shared_cache = SharedCache::Fixed(n),
                        }
                    }
                    slots.push((layer, kind == "value", pair));
                }
            }
        }
        if io.write_index.is_some() {
            if io.position_ids.is_none() || io.attention_mask.is_none() {
                return Err(GenerateError::Model(format!(
                    "'{}' places cache rows out of order: the model must take position_ids \
                     and attention_mask",
                    super::window::WRITE_INDEX
                )));
            }
            io.shared_cache = SharedCache::Yes;
        }
        slots.sort_by_key(|&(layer, value, _)| (layer, value));
        io.caches = slots.into_iter().map(|(_, _, p)| p).collect();
        Ok(io)
    }
}

fn cache_pair(
    past: &ValueDef,
    layer: usize,
    kind: &str,
    outputs: &[ValueDef],
    hints: &CacheHints,
) -> Result<(CachePair, Option<usize>), GenerateError> {
    let present = outputs
        .iter()
        .find(|o| cache_slot(&o.name, PRESENT) == Some((layer, kind)))
        .ok_or_else(|| {
            GenerateError::Model(format!(
                "input '{}' has no matching present output (present.{layer}.{kind})",
                past.name
            ))
        })?;
    let bad = |why: &str| GenerateError::Model(format!("cache input '{}': {why}", past.name));
    let dtype = past
        .dtype
        .filter(|t| t.is_float())
        .ok_or_else(|| bad("must be a float tensor"))?;
    let dims = past
        .dims
        .as_deref()
        .ok_or_else(|| bad("has no declared shape"))?;
    let [_, heads, length, size] = dims else {
        return Err(bad(&format!(
            "has {} dimensions; [batch, heads, length, head size] expected",
            dims.len()
        )));
    };
    // A fixed length is a cache that past and present share, allocated once.
    let fixed_len = match length {
        Dim::Fixed(n) => Some(*n),
        Dim::Sym(_) => None,
    };
    let fixed = |d: &Dim, hint: Option<usize>, what: &str| match (d, hint) {
        (Dim::Fixed(n), _) => Ok(*n),
        (Dim::Sym(_), Some(n)) => Ok(n),
        (Dim::Sym(s), None) => Err(bad(&format!(
            "its {what} is symbolic ('{s}') and no config gives it: put config.json \
             (num_key_value_heads, head_dim) or genai_config.json beside the model"
        ))),
    };
    let pair = CachePair {
        past: past.name.clone(),
        present: present.name.clone(),
        dtype,
        heads: fixed(heads, hints.heads, "head count")?,
        head_size: fixed(size, hints.head_size, "head size")?,
    };
    Ok((pair, fixed_len))
}

fn names(defs: &[ValueDef]) -> String {
    defs.iter()
        .map(|d| d.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}
