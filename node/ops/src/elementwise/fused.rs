//! FusedElementwise: a chain of float elementwise ops run as one kernel (graph/fuse.rs makes
//! these nodes). The node is rebuilt from its attributes alone, so a cluster fragment can ship
//! it as (op_type, attrs) like any other node:
//!
//! - `steps` (strings): the op type of each step, in order (see [`STEP_OPS`]);
//! - `operands` (ints), per step: -1 none (unary), -2 one scalar, -3 two scalars (Clip's
//!   bounds), k >= 0 the fused node's input k (0 is the chain's start value);
//! - `chain_right` (ints), per step: 1 when the running value is the second operand;
//! - `scalars` (floats): the scalar operands, in step order.
//!
//! Input 0 has the output's type; every other input has its dtype and broadcasts into its
//! shape. The CPU kernel runs the steps' own ops one after another (the reference); the GPU
//! kernel runs them all per element in float and stores once.

use crate::tensor::{DType, Tensor};
use crate::util::groups_1d;
use crate::{
    AttrValue, Attrs, BufRef, Dispatch, GpuKernel, InferInput, NodeSpec, Op, OpError, ValueType,
};
use vkml_shaders::fused_elementwise as kernel;
use vkml_shaders::op::{FusedOperand, FusedStep};

/// The op type a fused node has.
pub const OP_TYPE: &str = "FusedElementwise";

/// Step op types and their shader codes.
pub const STEP_OPS: [(&str, FusedStep); 15] = [
    ("Relu", FusedStep::Relu),
    ("Sigmoid", FusedStep::Sigmoid),
    ("Tanh", FusedStep::Tanh),
    ("Exp", FusedStep::Exp),
    ("Log", FusedStep::Log),
    ("Neg", FusedStep::Neg),
    ("Abs", FusedStep::Abs),
    ("Sqrt", FusedStep::Sqrt),
    ("Erf", FusedStep::Erf),
    ("Clip", FusedStep::Clip),
    ("Add", FusedStep::Add),
    ("Sub", FusedStep::Sub),
    ("Mul", FusedStep::Mul),
    ("Div", FusedStep::Div),
    ("Pow", FusedStep::Pow),
];

/// Limits set by the 128-byte push-constant block: 6 buffer addresses (input 0, output, 4
/// operands), n, 4 x (inner, count), 4 words of 16-bit steps, 7 scalars.
pub const MAX_STEPS: usize = 8;
pub const MAX_OPERANDS: usize = 4;
pub const MAX_SCALARS: usize = 7;

/// The op types that take a second operand.
pub fn is_binary(op: &str) -> bool {
    matches!(op, "Add" | "Sub" | "Mul" | "Div" | "Pow")
}

/// What a step combines the running value with.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Operand {
    None,
    Scalar(f32),
    /// Clip's bounds (missing ones as infinities).
    Bounds(f32, f32),
    /// An input of the fused node.
    Input(usize),
}

impl Operand {
    pub fn scalars(&self) -> usize {
        match self {
            Operand::Scalar(_) => 1,
            Operand::Bounds(..) => 2,
            _ => 0,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub op: &'static str,
    pub operand: Operand,
    /// The running value is the second operand (`c - x`, `c / x`, `c ^ x`).
    pub chain_right: bool,
}

/// A chain's program, as the pass makes it and as the attributes carry it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Program {
    pub steps: Vec<Step>,
}

impl Program {
    pub fn scalars(&self) -> usize {
        self.steps.iter().map(|s| s.operand.scalars()).sum()
    }

    /// Highest input index used, plus one (at least 1: input 0 is always read).
    pub fn num_inputs(&self) -> usize {
        self.steps
            .iter()
            .filter_map(|s| match s.operand {
                Operand::Input(k) => Some(k + 1),
                _ => None,
            })
            .max()
            .unwrap_or(1)
            .max(1)
    }

    /// Whether the GPU kernel's push constants can hold it.
    pub fn fits(&self) -> bool {
        !self.steps.is_empty()
            && self.steps.len() <= MAX_STEPS
            && self.scalars() <= MAX_SCALARS
            && self.num_inputs() <= 1 + MAX_OPERANDS
    }

    pub fn to_attrs(&self) -> Attrs {
        let mut a = Attrs::default();
        let mut operands = Vec::new();
        let mut scalars = Vec::new();
        for s in &self.steps {
            operands.push(match s.operand {
                Operand::None => -1,
                Operand::Scalar(v) => {
                    scalars.push(v);
                    -2
                }
                Operand::Bounds(lo, hi) => {
                    scalars.extend([lo, hi]);
                    -3
                }
                Operand::Input(k) => k as i64,
            });
        }
        let steps = self.steps.iter().map(|s| s.op.to_string()).collect();
        let right = self.steps.iter().map(|s| s.chain_right as i64).collect();
        a.0.insert("steps".into(), AttrValue::Strings(steps));
        a.0.insert("operands".into(), AttrValue::Ints(operands));
        a.0.insert("chain_right".into(), AttrValue::Ints(right));
        a.0.insert("scalars".into(), AttrValue::Floats(scalars));
        a
    }

    pub fn from_attrs(a: &Attrs) -> Result<Program, OpError> {
        let bad = |m: String| OpError::invalid(format!("{OP_TYPE}: {m}"));
        let Some(AttrValue::Strings(names)) = a.get("steps") else {
            return Err(bad(
                "attribute 'steps' (a list of strings) is missing".into()
            ));
        };
        let operands = a.ints_opt("operands")?.unwrap_or(&[]);
        let right = a.ints_opt("chain_right")?.unwrap_or(&[]);
        let scalars = a.floats_opt("scalars")?.unwrap_or(&[]);
        if operands.len() != names.len() || right.len() != names.len() {
            return Err(bad(format!(
                "{} steps but {} operands and {} chain_right entries",
                names.len(),
                operands.len(),
                right.len()
            )));
        }
        let mut next = 0usize;
        let mut take = |n: usize| -> Result<&[f32], OpError> {
            let s = scalars
                .get(next..next + n)
                .ok_or_else(|| bad(format!("{} scalars are too few", scalars.len())))?;
            next += n;
            Ok(s)
        };
        let mut steps = Vec::with_capacity(names.len());
        for ((name, &o), &r) in names.iter().zip(operands).zip(right) {
            let Some(&(op, _)) = STEP_OPS.iter().find(|(n, _)| n == name) else {
                return Err(bad(format!("'{name}' cannot be a step")));
            };
            let operand = match o {
                -1 => Operand::None,
                -2 => Operand::Scalar(take(1)?[0]),
                -3 => {
                    let s = take(2)?;
                    Operand::Bounds(s[0], s[1])
                }
                k if k >= 0 => Operand::Input(k as usize),
                k => return Err(bad(format!("operand code {k} is not one"))),
            };
            let fits = match op {
                "Clip" => matches!(operand, Operand::Bounds(..)),
                op if is_binary(op) => matches!(operand, Operand::Scalar(_) | Operand::Input(_)),
                _ => operand == Operand::None,
            };
            if !fits || !(r == 0 || r == 1) || (r == 1 && !is_binary(op)) {
                return Err(bad(format!(
                    "step '{op}' cannot take operand code {o} with chain_right {r}"
                )));
            }
            steps.push(Step {
                op,
                operand,
                chain_right: r == 1,
            });
        }
        if next != scalars.len() {
            return Err(bad(format!(
                "{} scalars given, the steps use {next}",
                scalars.len()
            )));
        }
        let p = Program { steps };
        if !p.fits() {
            return Err(bad(format!(
                "a program of 1 to {MAX_STEPS} steps, {MAX_SCALARS} scalars and {MAX_OPERANDS} \
                 operand inputs besides input 0 is needed, got {} steps, {} scalars, {} inputs",
                p.steps.len(),
                p.scalars(),
                p.num_inputs()
            )));
        }
        Ok(p)
    }
}

/// How an operand of shape `b` is read for output element i: `(i / inner) % count`. That holds
/// when, right-aligned to `out`, b's non-1 dims are one contiguous block equal to out's there
/// (a full tensor, a bias `[C]`, a per-channel `[C,1,1]`, a single element); else `None`.
pub fn block_broadcast(b: &[usize], out: &[usize]) -> Option<(u32, u32)> {
    if b.len() > out.len() {
        return None;
    }
    let pad = out.len() - b.len();
    let dim = |k: usize| if k < pad { 1 } else { b[k - pad] };
    let non1: Vec<usize> = (0..out.len()).filter(|&k| dim(k) != 1).collect();
    let (Some(&first), Some(&last)) = (non1.first(), non1.last()) else {
        return Some((1, 1));
    };
    if (first..=last).any(|k| dim(k) != out[k]) {
        return None;
    }
    let count: usize = out[first..=last].iter().product();
    let inner: usize = out[last + 1..].iter().product();
    Some((
        u32::try_from(inner.max(1)).ok()?,
        u32::try_from(count).ok()?,
    ))
}

#[derive(Debug)]
pub struct Fused {
    program: Program,
    /// Each step's own op, built at opset 13 (numpy broadcasting, Clip bounds as inputs).
    ops: Vec<Box<dyn Op>>,
}

fn step_op(op: &str) -> Result<Box<dyn Op>, OpError> {
    crate::build(&NodeSpec {
        name: OP_TYPE,
        op_type: op,
        attrs: &Attrs::default(),
        opset: 13,
        num_inputs: if op == "Clip" { 3 } else { 2 },
        num_outputs: 1,
    })
}

impl Fused {
    pub fn build(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
        Ok(Box::new(Fused::new(Program::from_attrs(spec.attrs)?)?))
    }

    pub fn new(program: Program) -> Result<Fused, OpError> {
        let ops = program
            .steps
            .iter()
            .map(|s| step_op(s.op))
            .collect::<Result<_, _>>()?;
        Ok(Fused { program, ops })
    }

    pub fn program(&self) -> &Program {
        &self.program
    }
}

fn scalar(dtype: DType, v: f32) -> Tensor {
    match dtype {
        DType::F16 => Tensor::scalar(half::f16::from_f32(v)),
        _ => Tensor::scalar(v),
    }
}

/// A step's inputs around the running value `x`, in the step op's order.
fn arrange<T: Clone>(x: T, s: &Step, operand: Option<T>, bounds: [T; 2]) -> Vec<Option<T>> {
    match s.operand {
        Operand::None => vec![Some(x)],
        Operand::Bounds(..) => {
            let [lo, hi] = bounds;
            vec![Some(x), Some(lo), Some(hi)]
        }
        _ if s.chain_right => vec![operand, Some(x)],
        _ => vec![Some(x), operand],
    }
}

impl Op for Fused {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let n = self.program.num_inputs();
        if inputs.len() < n || inputs[..n].iter().any(Option::is_none) {
            return Err(OpError::invalid(format!(
                "{OP_TYPE}: the program reads {n} inputs"
            )));
        }
        let x = inputs[0].expect("checked").ty;
        if !matches!(x.dtype, DType::F32 | DType::F16) {
            return Err(OpError::unsupported(format!(
                "{OP_TYPE} of {} (f32 and f16 only)",
                x.dtype
            )));
        }
        for (k, i) in inputs.iter().enumerate().skip(1) {
            if let Some(i) = i
                && i.ty.dtype != x.dtype
            {
                return Err(OpError::invalid(format!(
                    "{OP_TYPE}: input {k} is {}, input 0 is {}",
                    i.ty.dtype, x.dtype
                )));
            }
        }
        let scalar_ty = ValueType::new(x.dtype, vec![]);
        let at = |ty| Some(InferInput { ty, value: None });
        for (s, op) in self.program.steps.iter().zip(&self.ops) {
            let operand = match s.operand {
                Operand::Input(k) => inputs[k].map(|i| InferInput {
                    ty: i.ty,
                    value: None,
                }),
                _ => at(&scalar_ty),
            };
            let args = arrange(at(x), s, Some(operand), [at(&scalar_ty); 2]);
            let args: Vec<Option<InferInput<'_>>> = args.into_iter().map(Option::flatten).collect();
            let out = op.infer(&args)?;
            if out.first() != Some(x) {
                return Err(OpError::invalid(format!(
                    "{OP_TYPE}: step {} would turn {x} into {:?}; every step keeps input 0's type",
                    s.op, out
                )));
            }
        }
        Ok(vec![x.clone()])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let x = crate::util::req(inputs, 0)?;
        let dtype = x.dtype();
        let mut v = x.clone();
        for (s, op) in self.program.steps.iter().zip(&self.ops) {
            let (sc, bounds) = match s.operand {
                Operand::Scalar(c) => (Some(scalar(dtype, c)), None),
                Operand::Bounds(lo, hi) => (None, Some([scalar(dtype, lo), scalar(dtype, hi)])),
                _ => (None, None),
            };
            let operand = match s.operand {
                Operand::Input(k) => Some(crate::util::req(inputs, k)?),
                _ => sc.as_ref(),
            };
            let b = bounds
                .as_ref()
                .map_or([None, None], |[l, h]| [Some(l), Some(h)]);
            let args: Vec<Option<&Tensor>> = arrange(Some(&v), s, operand.map(Some), b)
                .into_iter()
                .map(Option::flatten)
                .collect();
            v = op.run_cpu(&args, outputs)?.remove(0);
        }
        Ok(vec![v])
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> Option<GpuKernel> {
        let out = outputs.first()?;
        let variant = by_dtype!(out.dtype, kernel::Variant, [F32, F16])?;
        if !self.program.fits() {
            return None;
        }
        let n = u32::try_from(out.numel()).ok()?;
        // Unused operand slots point at input 0; the program never reads them.
        let mut operands: [BufRef; MAX_OPERANDS] = std::array::from_fn(|_| BufRef::Input(0));
        let mut inner = [1u32; MAX_OPERANDS];
        let mut count = [1u32; MAX_OPERANDS];
        for k in 1..self.program.num_inputs() {
            let ty = inputs.get(k).copied().flatten()?;
            let (i, c) = block_broadcast(&ty.shape, &out.shape)?;
            inner[k - 1] = i;
            count[k - 1] = c;
            operands[k - 1] = BufRef::Input(k);
        }
        let mut prog = [0u32; MAX_STEPS / 2];
        let mut scalars = Vec::with_capacity(MAX_SCALARS);
        for (j, s) in self.program.steps.iter().enumerate() {
            let code = STEP_OPS.iter().find(|(n, _)| *n == s.op)?.1.code();
            let si = scalars.len() as u32;
            let src = match s.operand {
                Operand::None => FusedOperand::None,
                Operand::Scalar(c) => {
                    scalars.push(c);
                    FusedOperand::Scalar
                }
                Operand::Bounds(lo, hi) => {
                    scalars.extend([lo, hi]);
                    FusedOperand::Scalar
                }
                Operand::Input(0) => FusedOperand::Start,
                Operand::Input(k) => *[
                    FusedOperand::Buffer0,
                    FusedOperand::Buffer1,
                    FusedOperand::Buffer2,
                    FusedOperand::Buffer3,
                ]
                .get(k - 1)?,
            };
            let word = code | (src.code() << 5) | ((s.chain_right as u32) << 8) | (si << 9);
            prog[j / 2] |= word << (16 * (j % 2));
        }
        scalars.resize(MAX_SCALARS, 0.0);
        let [b0, b1, b2, b3] = operands;
        let dispatch = Dispatch::new(
            variant,
            kernel::Buffers {
                x: BufRef::Input(0),
                y: BufRef::Output(0),
                b0,
                b1,
                b2,
                b3,
            },
            kernel::Params {
                n,
                inner,
                count,
                prog,
                sc: scalars.try_into().ok()?,
            },
            groups_1d(n as usize, 256),
        );
        Some(GpuKernel {
            scratch: vec![],
            dispatches: if n == 0 { vec![] } else { vec![dispatch] },
        })
    }

    fn flops(&self, _inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> u64 {
        outputs.iter().map(|o| o.numel() as u64).sum::<u64>() * self.program.steps.len() as u64
    }
}
