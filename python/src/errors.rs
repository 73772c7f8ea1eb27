//! The runtime's errors as Python exceptions: `VkmlError` and a subclass per kind a caller
//! may want to catch apart, each carrying the runtime's own message.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

create_exception!(
    vkml,
    VkmlError,
    PyException,
    "An error of the VKML runtime."
);
create_exception!(
    vkml,
    InvalidModel,
    VkmlError,
    "The model file could not be read or is not a valid ONNX model."
);
create_exception!(
    vkml,
    InvalidInput,
    VkmlError,
    "An input is missing, unknown, or of the wrong type or shape."
);
create_exception!(
    vkml,
    UnsupportedOp,
    VkmlError,
    "The model uses an operator (or a form of one) VKML does not run."
);
create_exception!(
    vkml,
    DeviceError,
    VkmlError,
    "A device failed, or none can hold or run the model."
);
create_exception!(
    vkml,
    ClusterError,
    VkmlError,
    "A cluster could not be reached or failed a request."
);

/// The exception class for a runtime error, with its message.
pub fn to_py(e: vkml::Error) -> PyErr {
    use vkml::Error as E;
    let message = e.to_string();
    match e {
        E::Io { .. } | E::Load(_) => InvalidModel::new_err(message),
        E::Unsupported(_) | E::UnsupportedNode { .. } => UnsupportedOp::new_err(message),
        E::Input(_) | E::Tensor(_) | E::TensorFile(_) | E::TooLarge(_) => {
            InvalidInput::new_err(message)
        }
        E::Placement(_) | E::Device(_) => DeviceError::new_err(message),
        E::Node { .. } => VkmlError::new_err(message),
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("VkmlError", py.get_type::<VkmlError>())?;
    m.add("InvalidModel", py.get_type::<InvalidModel>())?;
    m.add("InvalidInput", py.get_type::<InvalidInput>())?;
    m.add("UnsupportedOp", py.get_type::<UnsupportedOp>())?;
    m.add("DeviceError", py.get_type::<DeviceError>())?;
    m.add("ClusterError", py.get_type::<ClusterError>())?;
    Ok(())
}
