//! One ONNX backend test on one backend: read its data as the graph declares it, load the model,
//! run every data set and compare with the pass rule.

use std::fmt;
use std::path::{Path, PathBuf};

use vkml::io::{Value, read_value_pb};
use vkml::onnx::{DeclaredType, LoadError, ModelOutline};
use vkml::{DType, DeviceSelection, Error, Session, SessionOptions, Tensor};

/// Why a test failed, coarsely, for the tables of CONFORMANCE.md.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Category {
    /// An op type vkml does not implement.
    UnsupportedOp,
    /// An element type an op or the loader refuses, or a map value.
    UnsupportedType,
    /// Any other "not supported" (an attribute value, a model-local function...).
    UnsupportedFeature,
    /// It ran and an output differs in dtype, shape or value.
    WrongValue,
    /// Anything else: a failed plan, a run-time error, a panic, a timeout.
    Error,
}

impl Category {
    pub const ALL: [Category; 5] = [
        Category::UnsupportedOp,
        Category::UnsupportedType,
        Category::UnsupportedFeature,
        Category::WrongValue,
        Category::Error,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Category::UnsupportedOp => "unsupported op",
            Category::UnsupportedType => "unsupported type",
            Category::UnsupportedFeature => "unsupported feature",
            Category::WrongValue => "wrong value",
            Category::Error => "error",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Passed, with the number of ops the plan put on a GPU and on the CPU (for the last data
    /// set; ops computed while planning, because their inputs were known, count in neither).
    Pass {
        gpu_ops: usize,
        cpu_ops: usize,
    },
    Fail {
        category: Category,
        message: String,
    },
}

impl Outcome {
    pub fn passed(&self) -> bool {
        matches!(self, Outcome::Pass { .. })
    }

    pub fn fail(category: Category, message: impl Into<String>) -> Outcome {
        Outcome::Fail {
            category,
            message: message.into(),
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Pass { .. } => f.write_str("pass"),
            Outcome::Fail { category, message } => write!(f, "{}: {message}", category.label()),
        }
    }
}

/// The two backends every test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Backend {
    Cpu,
    Vulkan,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Cpu => "cpu",
            Backend::Vulkan => "vulkan",
        }
    }

    fn devices(self) -> DeviceSelection {
        match self {
            Backend::Cpu => DeviceSelection::Cpu,
            Backend::Vulkan => DeviceSelection::Vulkan,
        }
    }
}

/// A data set's values, each with the name the graph gives it.
struct DataSet {
    dir: PathBuf,
    inputs: Vec<(String, Value)>,
    outputs: Vec<(String, Value)>,
}

/// `test_data_set_<k>` folders in numeric order.
fn data_set_dirs(test: &Path) -> Vec<PathBuf> {
    let mut sets: Vec<(usize, PathBuf)> = std::fs::read_dir(test)
        .map(|rd| {
            rd.filter_map(|e| {
                let e = e.ok()?;
                let k = e
                    .file_name()
                    .to_str()?
                    .strip_prefix("test_data_set_")?
                    .parse()
                    .ok()?;
                Some((k, e.path()))
            })
            .collect()
        })
        .unwrap_or_default();
    sets.sort();
    sets.into_iter().map(|(_, p)| p).collect()
}

/// `<prefix>_<i>.pb` for each declared value, in order, read as its declared type.
fn read_values(
    dir: &Path,
    prefix: &str,
    declared: &[(String, DeclaredType)],
) -> Result<Vec<(String, Value)>, Outcome> {
    let mut out = Vec::new();
    for (i, (name, ty)) in declared.iter().enumerate() {
        let path = dir.join(format!("{prefix}_{i}.pb"));
        if !path.exists() {
            // An optional input the data set leaves out.
            break;
        }
        let (_, value) = read_value_pb(&path, ty).map_err(|e| {
            let msg = format!("reading {prefix}_{i}.pb ({ty}): {e}");
            let category = if msg.contains("does not support") || msg.contains("not supported") {
                Category::UnsupportedType
            } else {
                Category::Error
            };
            Outcome::fail(category, msg)
        })?;
        out.push((name.clone(), value));
    }
    if dir.join(format!("{prefix}_{}.pb", declared.len())).exists() {
        return Err(Outcome::fail(
            Category::Error,
            format!(
                "{}: more {prefix} files than the graph declares ({})",
                dir.display(),
                declared.len()
            ),
        ));
    }
    Ok(out)
}

fn read_data_sets(test: &Path, outline: &ModelOutline) -> Result<Vec<DataSet>, Outcome> {
    let dirs = data_set_dirs(test);
    if dirs.is_empty() {
        return Err(Outcome::fail(
            Category::Error,
            "no test_data_set_<k> folder",
        ));
    }
    dirs.into_iter()
        .map(|dir| {
            Ok(DataSet {
                inputs: read_values(&dir, "input", &outline.inputs)?,
                outputs: read_values(&dir, "output", &outline.outputs)?,
                dir,
            })
        })
        .collect()
}

/// ONNX's element type names, as messages about refused types spell them.
const TYPE_NAMES: [&str; 26] = [
    "float",
    "double",
    "float16",
    "bfloat16",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "bool",
    "string",
    "complex64",
    "complex128",
    "float8e4m3fn",
    "float8e4m3fnuz",
    "float8e5m2",
    "float8e5m2fnuz",
    "float8e8m0",
    "float4e2m1",
    "int4",
    "uint4",
    "int2",
    "uint2",
];

/// Whether a "not supported" message is about a type: it names an element type or a
/// non-tensor kind of value.
fn about_a_type(m: &str) -> bool {
    let kinds = [
        "sequence",
        "map",
        "optional",
        "sparse",
        "element type",
        "of type",
    ];
    kinds.iter().any(|k| m.contains(k))
        || m.split(|c: char| !c.is_ascii_alphanumeric())
            .any(|w| TYPE_NAMES.contains(&w))
}

/// Sorts a library error into a category; the message is the error's own.
pub fn classify(e: &Error) -> Category {
    let unsupported = |m: &str| {
        if about_a_type(m) {
            Category::UnsupportedType
        } else {
            Category::UnsupportedFeature
        }
    };
    match e {
        // An op of another domain (ai.onnx.ml, the preview and training domains) is an op
        // vkml does not implement; a model of only such ops names no default-domain opset.
        Error::UnsupportedNode { message, .. }
            if message.contains("is not implemented") || message.contains("operator domain") =>
        {
            Category::UnsupportedOp
        }
        Error::Load(LoadError::Unsupported(m)) if m.contains("imports no opset of the default") => {
            Category::UnsupportedOp
        }
        Error::UnsupportedNode { message, .. } => unsupported(message),
        Error::Load(LoadError::Unsupported(m)) | Error::Unsupported(m) => unsupported(m),
        _ => Category::Error,
    }
}

fn error_outcome(what: &str, e: &Error) -> Outcome {
    Outcome::fail(classify(e), format!("{what}: {e}"))
}

/// Runs one test folder on one backend. Paths inside the test's folder are shortened to their
/// relative form in messages.
pub fn run_test(test: &Path, outline: &ModelOutline, backend: Backend) -> Outcome {
    match run_test_in(test, outline, backend) {
        Outcome::Fail { category, message } => {
            let prefix = format!("{}/", test.display());
            Outcome::fail(category, message.replace(&prefix, ""))
        }
        pass => pass,
    }
}

fn run_test_in(test: &Path, outline: &ModelOutline, backend: Backend) -> Outcome {
    let options = SessionOptions {
        devices: backend.devices(),
        ..Default::default()
    };
    let load = || Session::load(test.join("model.onnx"), options.clone());
    // The data is decoded first, whatever the model: reading every value as declared is part
    // of the test. When a value's type is refused, the model's own load error (an op vkml
    // lacks, say) is the more precise reason, if there is one.
    let sets = match read_data_sets(test, outline) {
        Ok(s) => s,
        Err(o) => {
            return match load() {
                Err(e) => error_outcome("load", &e),
                Ok(_) => o,
            };
        }
    };
    let session = match load() {
        Ok(s) => s,
        Err(e) => return error_outcome("load", &e),
    };
    let mut placed = (0, 0);
    for set in &sets {
        let set_name = set
            .dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let feeds: Vec<(&str, Value)> = set
            .inputs
            .iter()
            .map(|(n, v)| (n.as_str(), v.clone()))
            .collect();
        let got = match session.run_values(&feeds) {
            Ok(g) => g,
            Err(e) => return error_outcome(&format!("run {set_name}"), &e),
        };
        if let Ok(summary) = session.plan_summary_values(&feeds) {
            let on = |cpu: bool| {
                summary
                    .ops_per_device
                    .iter()
                    .filter(|(d, _)| (d.as_str() == "cpu") == cpu)
                    .map(|(_, n)| n)
                    .sum::<usize>()
            };
            placed = (on(false), on(true));
        }
        if got.len() != set.outputs.len() {
            return Outcome::fail(
                Category::WrongValue,
                format!(
                    "{set_name}: {} outputs, the data set has {}",
                    got.len(),
                    set.outputs.len()
                ),
            );
        }
        for ((name, g), (_, want)) in got.iter().zip(&set.outputs) {
            let check = if draws_random(outline) {
                compare_random
            } else {
                compare_values
            };
            if let Err(why) = check(g, want) {
                return Outcome::fail(
                    Category::WrongValue,
                    format!("{set_name}: output '{name}': {why}"),
                );
            }
        }
    }
    Outcome::Pass {
        gpu_ops: placed.0,
        cpu_ops: placed.1,
    }
}

/// The ops whose outputs are random draws.
const RANDOM: [&str; 6] = [
    "Bernoulli",
    "RandomUniform",
    "RandomUniformLike",
    "RandomNormal",
    "RandomNormalLike",
    "Multinomial",
];

fn draws_random(outline: &ModelOutline) -> bool {
    outline
        .op_types
        .iter()
        .any(|o| RANDOM.contains(&o.as_str()))
}

/// The pass rule of a random graph: dtype and shape, and 0s and 1s where the reference
/// has only those (a Bernoulli draw).
fn compare_random(got: &Value, want: &Value) -> Result<(), String> {
    let (Value::Tensor(g), Value::Tensor(w)) = (got, want) else {
        return compare_values(got, want);
    };
    if g.dtype() != w.dtype() || g.shape() != w.shape() {
        return Err(format!("{g:?} instead of {w:?}"));
    }
    let binary = |t: &Tensor| {
        t.to_f64_vec()
            .map(|v| v.iter().all(|&x| x == 0.0 || x == 1.0))
            .unwrap_or(false)
    };
    if binary(w) && !binary(g) {
        return Err("values other than 0 and 1 where the reference draws 0s and 1s".into());
    }
    Ok(())
}

/// [`compare`] through sequences and optionals: the same structure, each tensor passing.
fn compare_values(got: &Value, want: &Value) -> Result<(), String> {
    match (got, want) {
        (Value::Tensor(g), Value::Tensor(w)) => compare(g, w),
        (Value::Sequence(g), Value::Sequence(w)) if g.len() == w.len() => g
            .iter()
            .zip(w)
            .enumerate()
            .try_for_each(|(k, (g, w))| compare_values(g, w).map_err(|e| format!("[{k}]: {e}"))),
        (Value::Optional(None), Value::Optional(None)) => Ok(()),
        (Value::Optional(Some(g)), Value::Optional(Some(w))) => compare_values(g, w),
        _ => Err(format!("{} instead of {}", describe(got), describe(want))),
    }
}

fn describe(v: &Value) -> String {
    match v {
        Value::Sequence(items) => format!("a sequence of {}", items.len()),
        Value::Optional(None) => "an empty optional".into(),
        Value::Optional(Some(_)) => "an optional holding a value".into(),
        v => format!("a {}", v.kind()),
    }
}

/// The pass rule: same dtype and shape; integers and booleans exactly equal; floats within
/// |a - b| <= 1e-7 + rtol * |b| with rtol 1e-3 (1e-2 for float16 and bfloat16); NaN matches NaN.
pub fn compare(got: &Tensor, want: &Tensor) -> Result<(), String> {
    if got.dtype() != want.dtype() {
        return Err(format!("dtype {} instead of {}", got.dtype(), want.dtype()));
    }
    if got.shape() != want.shape() {
        return Err(format!(
            "shape {:?} instead of {:?}",
            got.shape(),
            want.shape()
        ));
    }
    // The low-precision floats hold a few bits of value: exactly equal, NaN matching NaN
    // whatever its bits.
    if vkml::lowp::Float::of(want.dtype()).is_some() {
        let g = vkml::lowp::to_f32_vec(got);
        let w = vkml::lowp::to_f32_vec(want);
        return match g
            .iter()
            .zip(&w)
            .position(|(a, b)| !(a == b || (a.is_nan() && b.is_nan())))
        {
            None => Ok(()),
            Some(i) => Err(format!(
                "values differ, first at flat index {i}: got {} want {}",
                g[i], w[i]
            )),
        };
    }
    if !want.dtype().is_float() {
        if got.bytes() == want.bytes() {
            return Ok(());
        }
        let size = want.dtype().size();
        let first = got
            .bytes()
            .chunks(size)
            .zip(want.bytes().chunks(size))
            .position(|(a, b)| a != b)
            .unwrap_or(0);
        let show = |t: &Tensor| match t.dtype() {
            DType::Bool => t.view_bool().map(|v| v[first].to_string()),
            _ => t.to_i64_vec().map(|v| v[first].to_string()),
        };
        return Err(format!(
            "values differ, first at flat index {first}: got {} want {}",
            show(got).unwrap_or_default(),
            show(want).unwrap_or_default()
        ));
    }
    let rtol = match want.dtype() {
        DType::F16 | DType::BF16 => 1e-2,
        _ => 1e-3,
    };
    let g = got.to_f64_vec().map_err(|e| e.to_string())?;
    let w = want.to_f64_vec().map_err(|e| e.to_string())?;
    let mut bad = 0usize;
    let mut worst: Option<(usize, f64)> = None;
    for (i, (&a, &b)) in g.iter().zip(&w).enumerate() {
        let ok = (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= 1e-7 + rtol * b.abs();
        if !ok {
            bad += 1;
            let excess = (a - b).abs() - rtol * b.abs();
            let excess = if excess.is_nan() {
                f64::INFINITY
            } else {
                excess
            };
            if worst.is_none_or(|(_, e)| excess > e) {
                worst = Some((i, excess));
            }
        }
    }
    match worst {
        None => Ok(()),
        Some((i, _)) => Err(format!(
            "{bad} of {} values outside 1e-7 + {rtol:e}*|want|; worst at flat index {i}: got {} want {}",
            w.len(),
            g[i],
            w[i]
        )),
    }
}

/// The pass rule on hand-made cases; run before the suite (this harness has no #[test]s), so a
/// broken comparison cannot pass everything.
pub fn check_pass_rule() {
    {
        let t = |v: Vec<f32>| Value::Tensor(Tensor::from_vec(vec![v.len()], v));
        assert!(compare_random(&t(vec![1.0, 0.0]), &t(vec![0.0, 0.0])).is_ok());
        assert!(compare_random(&t(vec![0.5, 0.0]), &t(vec![1.0, 0.0])).is_err());
        assert!(compare_random(&t(vec![0.0]), &t(vec![1.0, 0.0])).is_err());
    }
    {
        let want = Tensor::from_vec(vec![3], vec![1.0f32, f32::NAN, f32::INFINITY]);
        let close = Tensor::from_vec(vec![3], vec![1.0009f32, f32::NAN, f32::INFINITY]);
        assert!(compare(&close, &want).is_ok());
        let far = Tensor::from_vec(vec![3], vec![1.0011f32, f32::NAN, f32::INFINITY]);
        assert!(compare(&far, &want).is_err());
        let nan = Tensor::from_vec(vec![3], vec![1.0f32, 0.0, f32::INFINITY]);
        assert!(compare(&nan, &want).is_err());
        let shape = Tensor::from_vec(vec![1, 3], vec![1.0f32, f32::NAN, f32::INFINITY]);
        assert!(compare(&shape, &want).is_err());
        let ints = Tensor::from_vec(vec![2], vec![1i64, 2]);
        assert!(compare(&ints, &Tensor::from_vec(vec![2], vec![1i64, 3])).is_err());
        assert!(compare(&ints, &Tensor::from_vec(vec![2], vec![1i32, 2])).is_err());
        let h = |x: f32| half::f16::from_f32(x);
        let f16 = Tensor::from_vec(vec![1], vec![h(1.0)]);
        assert!(compare(&Tensor::from_vec(vec![1], vec![h(1.0078)]), &f16).is_ok());
    }
}
