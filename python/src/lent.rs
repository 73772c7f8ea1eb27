//! A numpy array's own memory as the runtime's `Bytes`, so that a run reads a large input
//! where it is instead of from a copy (arrays::Lend::Share).
//!
//! The one place of this crate allowed `unsafe` (docs/ARCHITECTURE.md): viewing foreign memory
//! as a slice needs it, and what would do it for us does not exist under the wheel's stable ABI
//! (pyo3's `PyBuffer` needs Python 3.11's limited API, the wheel supports 3.9; rust-numpy's
//! slices live only as long as a GIL borrow, shorter than a `Bytes` owner).

use bytes::Bytes;
use numpy::{Element, PyArrayDyn, PyArrayMethods, PyUntypedArrayMethods};
use pyo3::prelude::*;

/// Keeps the array alive while the bytes are read; holds its data address and byte length as
/// numbers taken when it was lent.
struct Lent {
    _array: Py<PyAny>,
    at: usize,
    len: usize,
}

impl AsRef<[u8]> for Lent {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: `at..at + len` is the data of the array `_array` holds a reference to,
        // checked C-contiguous when lent (`lend`); that reference keeps the array, and a view's
        // base, from being freed, and numpy moves an array's data only in `resize`, which
        // refuses an array referenced elsewhere unless the caller turns that check off. The
        // bytes are read only while a local run uses them (arrays::Lend::Share), during
        // which the caller must not write to the array, as onnxruntime asks of its inputs.
        #[allow(unsafe_code)]
        unsafe {
            std::slice::from_raw_parts(self.at as *const u8, self.len)
        }
    }
}

/// The memory of `array`, where it is C-contiguous and aligned for `T`, as bytes that keep the
/// array alive; None otherwise.
pub fn lend<T: Element>(array: &Bound<'_, PyArrayDyn<T>>) -> Option<Bytes> {
    let data = array.data();
    if !array.is_c_contiguous() || !data.is_aligned() {
        return None;
    }
    let len = array.len() * std::mem::size_of::<T>();
    if len == 0 {
        return None;
    }
    Some(Bytes::from_owner(Lent {
        _array: array.clone().into_any().unbind(),
        at: data as usize,
        len,
    }))
}
