//! VKML's ops: the values they work on ([`tensor`], [`model`]) and the op registry. Adding an
//! op means, in predictable places:
//! - a type implementing [`Op`] in a file of this crate, holding its shape rule (`infer`) and
//!   its CPU reference kernel (`run_cpu`), registered by that file's `register`;
//! - a GLSL compute shader `shaders/<name>.comp`, named by the op's `gpu` description;
//! - tests on the crate's op test kit (`testkit`: building, running, comparing the shader
//!   with the CPU kernel on the test GPU).
//!
//! An op never touches Vulkan: `gpu` only describes which shader to dispatch over which
//! buffers with which push constants; the Vulkan layer records it.

#![deny(unsafe_code)]

use std::collections::BTreeMap;
use std::fmt;
use std::sync::OnceLock;

pub mod lowp;
pub mod model;
pub mod tensor;

pub use conv::FUSED as FUSED_CONV;
pub use elementwise::activation::Activation;
pub use size::{Size, SizeError};
pub use tensor::{DType, Tensor, TensorError};

use crate::tensor::numel;
pub use vkml_shaders::{FAULT_RECORD_BYTES, IndexFault, Kernel, Shader};

/// The variant of a per-element-type shader for a dtype, where the variants are named after
/// the dtypes: `by_dtype!(dtype, binary::Variant, [F32, F16])` is `Some(binary::Variant::F32)`
/// for `DType::F32`, ..., and `None` for a dtype not listed. `[F32 => F32Row, ...]` names
/// the variant of each dtype.
macro_rules! by_dtype {
    ($dtype:expr, $module:ident :: $variant:ident, [$($name:ident => $var:ident),* $(,)?]) => {
        match $dtype {
            $(crate::tensor::DType::$name => Some($module::$variant::$var),)*
            _ => None,
        }
    };
    ($dtype:expr, $module:ident :: $variant:ident, [$($name:ident),* $(,)?]) => {
        match $dtype {
            $(crate::tensor::DType::$name => Some($module::$variant::$name),)*
            _ => None,
        }
    };
}

/// The variant of a shader compiled per element width (`_b1`, `_b2`, `_b4`, `_b8`) for
/// elements of `$bytes` bytes.
macro_rules! by_width {
    ($bytes:expr, $module:ident :: $variant:ident) => {
        match $bytes {
            1 => Some($module::$variant::B1),
            2 => Some($module::$variant::B2),
            4 => Some($module::$variant::B4),
            8 => Some($module::$variant::B8),
            _ => None,
        }
    };
}

mod attrs;
pub mod size;
pub mod tuning;
pub mod util;

#[cfg(test)]
mod testkit;

mod affine_grid;
mod attention;
mod batchnorm;
mod bitcast;
mod cast;
mod causal_conv;
mod center_crop_pad;
mod col2im;
mod concat;
mod conv;
mod conv_transpose;
mod cpu_gemm;
mod cumsum;
mod deform_conv;
mod det;
mod einsum;
mod elementwise;
mod gather;
mod gather_nd;
mod gelu;
mod generate;
mod grid_sample;
mod image_decoder;
mod integer;
mod label_encoder;
mod linear_attention;
mod llm_norm;
pub mod lookup8;
mod loss;
mod lrn;
mod matmul;
mod matmul_nbits;
mod max_unpool;
mod ml;
mod nms;
mod norm;
mod numeric;
mod pad;
mod pool;
mod qgemm;
mod qlinear;
mod qlinear_add;
mod quantize;
mod random;
mod recurrent;
mod reduce;
mod remap;
mod resize;
mod roi_align;
mod rotary;
mod scatter;
mod select;
mod shape_ops;
mod signal;
mod simd;
mod slice;
mod softmax;
mod splitk;
mod strings;
mod tensor_scatter;
mod tfidf;
mod tile_expand;
mod topk;
mod training;
mod transpose;
mod tree_ensemble;
mod via_f32;
mod window;

pub use attrs::{AttrValue, Attrs};
pub use elementwise::fused;
pub use matmul::norm as norm_matmul;
pub use matmul::swiglu as swiglu_matmul;
pub use tuning::KernelTuning;

/// A concrete value type: element type and shape, all sizes known.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ValueType {
    pub dtype: DType,
    pub shape: Vec<usize>,
}

impl ValueType {
    pub fn new(dtype: DType, shape: Vec<usize>) -> ValueType {
        ValueType { dtype, shape }
    }

    pub fn of(t: &Tensor) -> ValueType {
        ValueType::new(t.dtype(), t.shape().to_vec())
    }

    /// Elements, saturating at `usize::MAX` (see [`tensor::numel`]).
    pub fn numel(&self) -> usize {
        numel(&self.shape)
    }

    /// Bytes, saturating at `usize::MAX`: a planner or budget given this refuses the value
    /// rather than seeing a wrapped small size. [`ValueType::checked_bytes`] says why.
    pub fn bytes(&self) -> usize {
        self.numel().saturating_mul(self.dtype.size())
    }

    /// Bytes, or an error when the shape is larger than vkml handles.
    pub fn checked_bytes(&self) -> Result<u64, size::SizeError> {
        size::bytes(self.dtype, &self.shape)
    }
}

impl fmt::Display for ValueType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{:?}", self.dtype, self.shape)
    }
}

/// What a shape rule sees of one input: its type, and its value when that is known while
/// planning (an initializer, a Constant, or something folded from them). Rules like Reshape's
/// need the value of their shape input.
#[derive(Clone, Copy, Debug)]
pub struct InferInput<'a> {
    pub ty: &'a ValueType,
    pub value: Option<&'a Tensor>,
}

/// Why an op cannot be built or run. The graph layer adds the node's name and op type.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum OpError {
    /// The node is malformed or its inputs do not fit its rule.
    #[error("{0}")]
    Invalid(String),
    /// Legal ONNX that this runtime does not implement (a dtype, an attribute value...).
    #[error("not supported: {0}")]
    Unsupported(String),
    /// The rule needs the value of this input (a shape, axes, pads, a count) and the value is
    /// only known at run time. The graph layer may then specialize the plan on the values of
    /// the graph inputs it comes from, as TensorRT does with shape tensors.
    #[error("input {0}'s value must be known when the model is planned")]
    NeedsValue(usize),
}

impl OpError {
    pub fn invalid(msg: impl Into<String>) -> OpError {
        OpError::Invalid(msg.into())
    }
    pub fn unsupported(msg: impl Into<String>) -> OpError {
        OpError::Unsupported(msg.into())
    }
}

/// One op instance, with its attributes already decoded and checked.
///
/// Inputs are positional; an omitted optional input is `None`. Trailing omitted inputs may be
/// absent from the slice altogether, so index with `.get(i)`.
pub trait Op: Send + Sync + fmt::Debug {
    /// Whether the op takes or makes the low-precision types ([`lowp`]): only those that
    /// convert them (Cast, QuantizeLinear, DequantizeLinear...) do, and a model giving any
    /// other op such a value is refused when it is planned, whatever its rule would say.
    fn low_precision(&self) -> bool {
        false
    }

    /// Whether the op takes or makes string tensors ([`DType::String`]): only the string ops
    /// (and Equal, LabelEncoder) do; a model giving any other op one is refused when planned.
    fn strings(&self) -> bool {
        false
    }

    /// Whether its outputs are drawn anew on every run (the random ops): such a node is never
    /// folded while planning, whatever it knows of its inputs.
    fn random(&self) -> bool {
        false
    }

    /// Shape and dtype rule: output types from input types (and known input values).
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError>;

    /// Reference kernel. `outputs` are the types `infer` gave for these inputs.
    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError>;

    /// The GPU kernels for these concrete types, or `None` when this op has no shader for
    /// them; the planner then keeps the op on the CPU backend.
    fn gpu(&self, _inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> Option<GpuKernel> {
        None
    }

    /// As [`Op::gpu`], also seeing the input values known while planning (an axes input, a
    /// scan axis) and the session's kernel choices: ops whose kernels depend on either
    /// override this one. The planner calls this; by default it is `gpu`.
    fn gpu_planned(
        &self,
        inputs: &[Option<InferInput<'_>>],
        outputs: &[ValueType],
        _tuning: &KernelTuning,
    ) -> Option<GpuKernel> {
        let types = util::types_of(inputs);
        self.gpu(&types, outputs)
    }

    /// Faster GPU kernels for devices with optional features (tensor cores), best first: a
    /// GPU runs the first whose shaders' needs it meets, else [`Op::gpu_planned`]'s kernel.
    /// They must compute the same outputs from the same buffers; the planner sizes memory and
    /// checks features with [`Op::gpu_planned`]'s (or with the last of these when that is
    /// `None`: then only devices meeting one of them can run the op).
    fn gpu_preferred(
        &self,
        _inputs: &[Option<InferInput<'_>>],
        _outputs: &[ValueType],
        _tuning: &KernelTuning,
    ) -> Vec<GpuKernel> {
        Vec::new()
    }

    /// Checks of input values made on the host before a run (indices in range, as the CPU
    /// kernel checks them): `inputs` carry every input's type, and the values of those on the
    /// host before a run (graph inputs, constants); the runtime calls this for every run whose
    /// values it has. Indices computed on a GPU during the run are checked there instead (the
    /// kernels record them in their `BufRef::Fault`, see [`Op::index_fault`]).
    fn check_values(&self, _inputs: &[Option<InferInput<'_>>]) -> Result<(), OpError> {
        Ok(())
    }

    /// The error for an index out of range that this op's GPU kernel recorded during a run
    /// (its `BufRef::Fault`), worded as the CPU kernel's error for the same index; `inputs`
    /// are the input types the kernel was built for.
    fn index_fault(&self, _inputs: &[Option<&ValueType>], f: &IndexFault) -> OpError {
        OpError::invalid(format!(
            "index {} (element {} of the indices) is out of range for an axis of size {}",
            f.index, f.element, f.dim
        ))
    }

    /// True when output 0 is input 0's bytes under another shape (Reshape, Flatten, Squeeze,
    /// Unsqueeze, Identity): on a GPU such an op costs nothing, its output aliases its input.
    fn is_view(&self) -> bool {
        false
    }

    /// True when the GPU kernels may write output `output` over input `input` (one buffer,
    /// same type) and still compute the op: nothing of the input is read after its bytes are
    /// overwritten. A value bound across runs then stays in one buffer (the executor's bound
    /// state): GroupQueryAttention's cache that past and present share is the case it is for.
    fn writes_in_place(&self, _input: usize, _output: usize) -> bool {
        false
    }

    /// Outputs that follow from the input types alone (Shape): folded at planning time even
    /// when the inputs' values are only known at run time.
    fn known_outputs(&self, _inputs: &[Option<&ValueType>]) -> Option<Vec<Tensor>> {
        None
    }

    /// Rough arithmetic cost, for the planner. Defaults to one operation per output element.
    fn flops(&self, _inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> u64 {
        outputs.iter().map(|o| o.numel() as u64).sum()
    }
}

/// The GPU side of an op: scratch buffers it needs and the dispatches to record, in order.
/// The Vulkan layer puts a barrier between two dispatches only when the second reads or writes
/// what the first wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuKernel {
    /// Sizes in bytes of temporary buffers, addressed as `BufRef::Scratch(i)`.
    pub scratch: Vec<u64>,
    pub dispatches: Vec<Dispatch>,
}

/// One compute dispatch of a kernel of `vkml_shaders`. It is built only by [`Dispatch::new`],
/// from one shader's typed variant, buffers and parameters, so a kernel cannot get another's
/// parameters or the wrong number of buffers. Push constants are laid out as the device
/// address (uint64) of each buffer, in order, then the parameters as 32-bit words.
#[derive(Debug, Clone, PartialEq)]
pub struct Dispatch {
    kernel: Kernel,
    buffers: Vec<BufRef>,
    params: Vec<u32>,
    /// Workgroup counts; see [`util::groups_1d`] for large 1-D launches.
    pub groups: [u32; 3],
}

impl Dispatch {
    pub fn new<S: Shader>(
        kernel: S,
        buffers: S::Buffers<BufRef>,
        params: S::Params,
        groups: [u32; 3],
    ) -> Dispatch {
        Dispatch {
            kernel: kernel.kernel(),
            buffers: S::buffer_list(buffers),
            params: S::param_words(&params),
            groups,
        }
    }

    pub fn kernel(&self) -> Kernel {
        self.kernel
    }

    /// The buffers, in the kernel's push order.
    pub fn buffers(&self) -> &[BufRef] {
        &self.buffers
    }

    /// The buffers, to point them elsewhere (a fused node renumbers its inputs); their number
    /// is the kernel's and cannot change.
    pub fn buffers_mut(&mut self) -> &mut [BufRef] {
        &mut self.buffers
    }

    /// The parameters as the 32-bit words that follow the addresses.
    pub fn params(&self) -> &[u32] {
        &self.params
    }
}

/// A buffer a dispatch reads or writes.
#[derive(Debug, Clone, PartialEq)]
pub enum BufRef {
    Input(usize),
    Output(usize),
    Scratch(usize),
    /// A small read-only table (index maps, per-input offsets) uploaded once when recording.
    Table(Vec<u32>),
    /// The op's fault record (`FAULT_RECORD_BYTES`, `Fault` in shaders/index.glsl): one per
    /// op, shared by its dispatches, zero before the run and read by the host after it; a
    /// kernel that meets an index out of range records it there, and the run fails with
    /// [`Op::index_fault`]'s error.
    Fault,
    /// This many u32 counters of the dispatch's own, zero when it starts; the kernel leaves
    /// them zero when it ends (a workgroup that counts the others in resets its counter), so
    /// they are zeroed once, when the dispatch is recorded, and never aliased.
    Counters(usize),
}

/// Everything a builder sees of a node.
pub struct NodeSpec<'a> {
    pub name: &'a str,
    pub op_type: &'a str,
    pub attrs: &'a Attrs,
    /// Opset version of the default domain (also for [`MS_DOMAIN`] ops, which have one
    /// version each: the loader refuses any other).
    pub opset: i64,
    pub num_inputs: usize,
    pub num_outputs: usize,
}

pub type Builder = fn(&NodeSpec<'_>) -> Result<Box<dyn Op>, OpError>;

/// The domain of ONNX Runtime's contrib ops (exporters' fused LLM ops, MatMulNBits...). Its
/// ops have a single version each: a model importing any other version is refused at load.
pub const MS_DOMAIN: &str = "com.microsoft";

/// (domain, op type) to builder; "" is the default domain.
pub struct Registry {
    builders: BTreeMap<(&'static str, &'static str), Builder>,
}

impl Registry {
    /// An op of the default domain.
    pub fn add(&mut self, op_type: &'static str, builder: Builder) {
        self.add_in("", op_type, builder);
    }

    /// An op of `domain` ([`MS_DOMAIN`]).
    pub fn add_in(&mut self, domain: &'static str, op_type: &'static str, builder: Builder) {
        let previous = self.builders.insert((domain, op_type), builder);
        debug_assert!(previous.is_none(), "op {domain}:{op_type} registered twice");
    }

    /// A default-domain op.
    pub fn get(&self, op_type: &str) -> Option<Builder> {
        self.get_in("", op_type)
    }

    pub fn get_in(&self, domain: &str, op_type: &str) -> Option<Builder> {
        self.builders.get(&(domain, op_type)).copied()
    }

    /// The default domain's op types.
    pub fn op_types(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.domain_op_types("")
    }

    pub fn domain_op_types<'a>(
        &'a self,
        domain: &'a str,
    ) -> impl Iterator<Item = &'static str> + 'a {
        self.builders
            .keys()
            .filter(move |(d, _)| *d == domain)
            .map(|(_, o)| *o)
    }
}

/// The registry of every op this build supports.
pub fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        let mut r = Registry {
            builders: BTreeMap::new(),
        };
        affine_grid::register(&mut r);
        attention::register(&mut r);
        batchnorm::register(&mut r);
        bitcast::register(&mut r);
        cast::register(&mut r);
        causal_conv::register(&mut r);
        center_crop_pad::register(&mut r);
        col2im::register(&mut r);
        concat::register(&mut r);
        conv::register(&mut r);
        conv_transpose::register(&mut r);
        cumsum::register(&mut r);
        deform_conv::register(&mut r);
        det::register(&mut r);
        einsum::register(&mut r);
        elementwise::register(&mut r);
        gather::register(&mut r);
        gather_nd::register(&mut r);
        gelu::register(&mut r);
        generate::register(&mut r);
        integer::register(&mut r);
        linear_attention::register(&mut r);
        llm_norm::register(&mut r);
        lookup8::register(&mut r);
        loss::register(&mut r);
        matmul::register(&mut r);
        matmul_nbits::register(&mut r);
        max_unpool::register(&mut r);
        ml::register(&mut r);
        label_encoder::register(&mut r);
        random::register(&mut r);
        strings::register(&mut r);
        norm::register(&mut r);
        pad::register(&mut r);
        pool::register(&mut r);
        qgemm::register(&mut r);
        qlinear::register(&mut r);
        qlinear_add::register(&mut r);
        quantize::register(&mut r);
        nms::register(&mut r);
        grid_sample::register(&mut r);
        image_decoder::register(&mut r);
        lrn::register(&mut r);
        recurrent::register(&mut r);
        reduce::register(&mut r);
        resize::register(&mut r);
        roi_align::register(&mut r);
        rotary::register(&mut r);
        scatter::register(&mut r);
        select::register(&mut r);
        shape_ops::register(&mut r);
        signal::register(&mut r);
        slice::register(&mut r);
        softmax::register(&mut r);
        tensor_scatter::register(&mut r);
        tfidf::register(&mut r);
        tile_expand::register(&mut r);
        topk::register(&mut r);
        training::register(&mut r);
        transpose::register(&mut r);
        r
    })
}

/// Builds the op for a node of the default domain.
pub fn build(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    build_in("", spec)
}

/// Builds the op for a node of `domain` ("" for the default one).
pub fn build_in(domain: &str, spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    match registry().get_in(domain, spec.op_type) {
        Some(builder) => builder(spec),
        None if domain.is_empty() => Err(OpError::unsupported(format!(
            "op type '{}' is not implemented",
            spec.op_type
        ))),
        None if registry().domain_op_types(domain).next().is_some() => {
            Err(OpError::unsupported(format!(
                "op type '{}' of domain '{domain}' is not implemented",
                spec.op_type
            )))
        }
        None => Err(OpError::unsupported(format!(
            "operator domain '{domain}' (op '{}')",
            spec.op_type
        ))),
    }
}
