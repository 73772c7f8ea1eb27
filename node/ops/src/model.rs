//! The model as the ONNX loader hands it over: plain Rust values, no protobuf types.
//! Everything after loading (graph IR, planner, execution) works from these.

use crate::Attrs;
use crate::tensor::{DType, Tensor};

/// A model file, decoded.
#[derive(Debug, Clone)]
pub struct ModelDef {
    pub ir_version: i64,
    /// Opset version of the default ("" / "ai.onnx") domain.
    pub opset: i64,
    pub producer: String,
    pub graph: GraphDef,
}

#[derive(Debug, Clone, Default)]
pub struct GraphDef {
    pub name: String,
    pub nodes: Vec<NodeDef>,
    /// Initializers (weights), in file order. Their bytes point into the model's mapping.
    pub initializers: Vec<(String, Tensor)>,
    /// Initializers whose bytes are not here yet (a cluster node plans a model before its
    /// external weights arrive): typed, and never folded while planning.
    pub deferred: Vec<DeferredWeight>,
    /// Graph inputs the caller must feed: declared inputs that are not initializers.
    pub inputs: Vec<ValueDef>,
    pub outputs: Vec<ValueDef>,
    /// Declared types of intermediate values, where the file has them.
    pub value_info: Vec<ValueDef>,
}

/// An initializer stored in external data whose bytes have not been read: its type, and
/// where they are (`location` as the model spells it, `offset`).
#[derive(Debug, Clone, PartialEq)]
pub struct DeferredWeight {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub location: String,
    pub offset: u64,
}

#[derive(Debug, Clone)]
pub struct NodeDef {
    /// The node's name in the file; when empty the loader names it `<op_type>_<index>`.
    pub name: String,
    pub op_type: String,
    /// "" for the default domain ("ai.onnx" is normalised to "").
    pub domain: String,
    /// Input value names; "" marks an omitted optional input.
    pub inputs: Vec<String>,
    pub outputs: Vec<String>,
    pub attrs: Attrs,
}

/// A declared value: its element type and shape when the file gives them. For a sequence or
/// an optional ([`Kind`]) they describe the tensors inside it.
#[derive(Debug, Clone, PartialEq)]
pub struct ValueDef {
    pub name: String,
    pub dtype: Option<DType>,
    /// None when the file declares no shape at all (rank unknown).
    pub dims: Option<Vec<Dim>>,
    pub kind: Kind,
}

/// What a declared value is: a tensor, or a sequence or optional of them, which vkml lowers
/// to tensors when it plans a model (node/src/lower/).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Kind {
    #[default]
    Tensor,
    Sequence(Box<Kind>),
    Optional(Box<Kind>),
}

impl Kind {
    pub fn is_tensor(&self) -> bool {
        matches!(self, Kind::Tensor)
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Kind::Tensor => f.write_str("tensor"),
            Kind::Sequence(k) => write!(f, "sequence of {k}s"),
            Kind::Optional(k) => write!(f, "optional {k}"),
        }
    }
}

/// One dimension of a declared shape.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dim {
    Fixed(usize),
    /// A named symbolic size (`batch`), or "?" when the file leaves it unnamed.
    Sym(String),
}

impl std::fmt::Display for Dim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Dim::Fixed(n) => write!(f, "{n}"),
            Dim::Sym(s) => f.write_str(s),
        }
    }
}
