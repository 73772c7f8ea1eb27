"""onnxruntime's OrtValue and IOBinding in VKML: values that stay where a run left them, for
loops that feed a run's outputs back in as the next run's inputs (a language model's caches).

A binding's run whose input is an OrtValue that the binding's previous run gave as an output
(bound with bind_output or bind_ortvalue_output, and bound again) feeds it back: the first such
run starts the runtime's bound state from the values, later ones run on that state, which is a
GPU buffer the run updates in place where the plan allows (docs/PYTHON.md). A run on the state
makes the values it took as inputs stale: reading one afterwards raises InvalidInput instead
of returning values a later run overwrote.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from . import _vkml
from ._vkml import InvalidInput, VkmlError

__all__ = ["OrtValue", "IOBinding"]

# onnxruntime's type names and the numpy types numpy() returns for them (bfloat16, which numpy
# lacks, comes back as float32).
_ELEMENT_TYPES = {
    "tensor(float)": np.float32,
    "tensor(double)": np.float64,
    "tensor(float16)": np.float16,
    "tensor(bfloat16)": np.float32,
    "tensor(int8)": np.int8,
    "tensor(int16)": np.int16,
    "tensor(int32)": np.int32,
    "tensor(int64)": np.int64,
    "tensor(uint8)": np.uint8,
    "tensor(uint16)": np.uint16,
    "tensor(uint32)": np.uint32,
    "tensor(uint64)": np.uint64,
    "tensor(bool)": np.bool_,
}

_NO_POINTERS = ("VKML never takes or hands out raw memory pointers (buffer_ptr, data_ptr): "
                "bind a numpy array with bind_cpu_input(name, array), an OrtValue with "
                "bind_ortvalue_input(name, value) or bind_ortvalue_output(name, value), and "
                "read a value with numpy()")


class OrtValue:
    """A tensor for io bindings (onnxruntime's OrtValue).

    ``ortvalue_from_numpy`` copies a numpy array into one; ``device_type`` ("cpu" or "vulkan")
    is a label: such a value is held in host memory and uploaded with each run that takes
    it. The values a binding's run gives are held where the run left them; when a later run
    of that binding takes them back as inputs, they stay there (in place on a GPU where the
    plan allows, ``device_name()`` then "vulkan")."""

    __slots__ = ("_v",)

    def __init__(self, value: "_vkml.Value") -> None:
        if not isinstance(value, _vkml.Value):
            raise InvalidInput("make an OrtValue with OrtValue.ortvalue_from_numpy or "
                               "OrtValue.ortvalue_from_shape_and_type")
        self._v = value

    @staticmethod
    def ortvalue_from_numpy(numpy_obj: Any, device_type: str = "cpu",
                            device_id: int = 0) -> "OrtValue":
        """A value holding a copy of ``numpy_obj`` (anything numpy.asarray takes).
        ``device_type`` is "cpu" or "vulkan" (any case); ``device_id`` is accepted and
        ignored: the session's plan decides which GPU a run uses."""
        array = numpy_obj if isinstance(numpy_obj, np.ndarray) else np.asarray(numpy_obj)
        return OrtValue(_vkml.Value.from_numpy(array, device_type))

    @staticmethod
    def ortvalue_from_shape_and_type(shape: Sequence[int], element_type: Any = np.float32,
                                     device_type: str = "cpu",
                                     device_id: int = 0) -> "OrtValue":
        """A value of zeros of ``shape`` and numpy type ``element_type``."""
        return OrtValue.ortvalue_from_numpy(np.zeros(tuple(shape), dtype=element_type),
                                            device_type, device_id)

    def numpy(self) -> np.ndarray:
        """A new numpy array with the values (downloaded where they are on a GPU)."""
        return self._v.numpy()

    def shape(self) -> List[int]:
        return list(self._v.shape())

    def data_type(self) -> str:
        """onnxruntime's type name: "tensor(float)", "tensor(int64)", ..."""
        return self._v.data_type()

    def element_type(self) -> Any:
        """The numpy type numpy() returns (float32 for bfloat16)."""
        return _ELEMENT_TYPES[self._v.data_type()]

    def device_name(self) -> str:
        """"cpu" or "vulkan" as asked; "vulkan" where a binding's runs keep it in a GPU
        buffer."""
        return self._v.device_name()

    def is_tensor(self) -> bool:
        return True

    def is_tensor_sequence(self) -> bool:
        return False

    def is_sparse_tensor(self) -> bool:
        return False

    def has_value(self) -> bool:
        return True

    def update_inplace(self, np_arr: Any) -> None:
        """Replaces the values with a copy of ``np_arr``'s, which has the value's type and
        element count (the value keeps its shape), as onnxruntime's does."""
        array = np_arr if isinstance(np_arr, np.ndarray) else np.asarray(np_arr)
        self._v.update_inplace(array)

    def data_ptr(self) -> int:
        """Not available: raises VkmlError (read the values with numpy())."""
        raise VkmlError(_NO_POINTERS)

    def _on_device(self) -> bool:
        """Whether the value is in a GPU buffer that the binding's runs update in place."""
        return self._v._on_device()

    def __repr__(self) -> str:
        return f"OrtValue(device={self._v.device_name()!r})"


class IOBinding:
    """Inputs and outputs bound to a session (onnxruntime's IOBinding, from
    ``InferenceSession.io_binding()``), run with ``session.run_with_iobinding(binding)``.

    Binding a name again replaces its value; outputs come back in the order they were bound.
    An input bound to an OrtValue that the binding's previous run gave as an output is fed
    back without leaving the runtime (see the module's doc). One thread runs a binding at a
    time; threads may share the session, each with a binding of its own."""

    def __init__(self, session: Any) -> None:
        self._session = session
        self._b = _vkml.Binding(session._sess)
        # bind_ortvalue_output's values, so that get_outputs returns the same objects.
        self._targets: Dict[str, OrtValue] = {}

    def bind_cpu_input(self, name: str, arr_on_cpu: Any) -> None:
        """Binds input ``name`` to a copy of ``arr_on_cpu`` (taken when bound: later changes
        to the array do not reach the run)."""
        array = arr_on_cpu if isinstance(arr_on_cpu, np.ndarray) else np.asarray(arr_on_cpu)
        self._b.bind_array(name, array)

    def bind_input(self, name: str, device_type: str, device_id: int, element_type: Any,
                   shape: Sequence[int], buffer_ptr: int) -> None:
        """Not available (it takes a raw device pointer): raises InvalidInput."""
        raise InvalidInput(f"bind_input('{name}', ...): {_NO_POINTERS}")

    def bind_ortvalue_input(self, name: str, ortvalue: OrtValue) -> None:
        """Binds input ``name`` to ``ortvalue`` (read when the run starts)."""
        self._b.bind_input(name, _value(ortvalue))

    def bind_output(self, name: str, device_type: str = "cpu", device_id: int = 0,
                    element_type: Any = None, shape: Optional[Sequence[int]] = None,
                    buffer_ptr: Optional[int] = None) -> None:
        """Binds output ``name``: each run gives a new OrtValue (``get_outputs``), labelled
        ``device_type`` ("cpu" or "vulkan"). ``element_type`` and ``shape`` are taken and
        not used, as onnxruntime does without ``buffer_ptr``; a ``buffer_ptr`` raises
        InvalidInput."""
        if buffer_ptr is not None:
            raise InvalidInput(f"bind_output('{name}', buffer_ptr=...): {_NO_POINTERS}")
        self._b.bind_output(name, device_type)
        self._targets.pop(name, None)

    def bind_ortvalue_output(self, name: str, ortvalue: OrtValue) -> None:
        """Binds output ``name`` to ``ortvalue``: each run puts the output into it. The same
        OrtValue bound as an input too is onnxruntime GenAI's shared past/present buffer: it
        is fed back, in place where the plan allows."""
        self._b.bind_output_value(name, _value(ortvalue))
        self._targets[name] = ortvalue

    def get_outputs(self) -> List[OrtValue]:
        """The last run's bound outputs, in the order they were bound."""
        out = []
        for name, value in self._b.outputs():
            target = self._targets.get(name)
            out.append(target if target is not None and target._v is value else OrtValue(value))
        return out

    def copy_outputs_to_cpu(self) -> List[np.ndarray]:
        """The last run's bound outputs as numpy arrays."""
        return [value.numpy() for _, value in self._b.outputs()]

    def clear_binding_inputs(self) -> None:
        self._b.clear_inputs()

    def clear_binding_outputs(self) -> None:
        self._b.clear_outputs()
        self._targets.clear()

    def synchronize_inputs(self) -> None:
        """Nothing to wait for: inputs are read when a run starts."""

    def synchronize_outputs(self) -> None:
        """Nothing to wait for: a run returns when its outputs are there."""


def _value(ortvalue: Any) -> "_vkml.Value":
    if not isinstance(ortvalue, OrtValue):
        raise InvalidInput(f"an OrtValue is expected, not a {type(ortvalue).__name__} (make "
                           "one with OrtValue.ortvalue_from_numpy)")
    return ortvalue._v
