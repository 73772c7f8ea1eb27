//! `vkml._vkml`: the Rust half of the Python package (python/vkml is the other). It holds a
//! loaded model ([`session::Session`]), moves numpy arrays in and out ([`arrays`]; inputs lent without a copy) and turns
//! the runtime's errors into Python exceptions ([`errors`]), and keeps values between an io
//! binding's runs ([`iobinding`]); onnxruntime's API shapes (InferenceSession, NodeArg,
//! SessionOptions, OrtValue, IOBinding) are spelled in Python on top of it.

// No unsafe here either, but for one module that lends numpy's memory to a run (lent.rs);
// pyo3 and numpy hold the rest (docs/ARCHITECTURE.md, "The crates").
#![deny(unsafe_code)]

mod arrays;
mod cluster;
mod errors;
mod generate;
mod iobinding;
mod lent;
mod session;

use pyo3::prelude::*;

/// The execution providers this build can offer, in onnxruntime's spelling, best first:
/// Vulkan where a Vulkan device opens, and the CPU always.
#[pyfunction]
fn available_providers() -> Vec<&'static str> {
    let mut providers = Vec::new();
    if session::vulkan_available() {
        providers.push(session::VULKAN);
    }
    providers.push(session::CPU);
    providers
}

/// The address the runtime reads a run's input `array` from (tests: whether the array is lent
/// rather than copied, arrays::Lend).
#[pyfunction]
fn _input_address(array: &Bound<'_, PyAny>) -> PyResult<usize> {
    let t = arrays::to_tensor(array, arrays::Lend::Share, || "the array".into())?;
    Ok(t.bytes().as_ptr() as usize)
}

#[pymodule]
fn _vkml(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<session::Session>()?;
    m.add_class::<cluster::Cluster>()?;
    m.add_class::<cluster::RemoteSession>()?;
    m.add_class::<generate::Generator>()?;
    m.add_class::<iobinding::Value>()?;
    m.add_class::<iobinding::Binding>()?;
    m.add_function(wrap_pyfunction!(available_providers, m)?)?;
    m.add_function(wrap_pyfunction!(_input_address, m)?)?;
    errors::register(m)?;
    Ok(())
}
