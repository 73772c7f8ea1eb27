"""VKML, a Vulkan ONNX inference runtime, in onnxruntime's Python API.

Switching from onnxruntime is the import line::

    import vkml as ort

    sess = ort.InferenceSession("model.onnx", providers=["VulkanExecutionProvider",
                                                          "CPUExecutionProvider"])
    x = sess.get_inputs()[0]
    outputs = sess.run(None, {x.name: array})

Providers are taken in order, as onnxruntime does: "VulkanExecutionProvider" runs the model on
the machine's Vulkan GPUs (ops without a GPU kernel on the CPU), "CPUExecutionProvider" on the
CPU backend. Providers this build does not have (CUDA, TensorRT, ...) are skipped with a
warning, and so is Vulkan where no Vulkan device opens, when the CPU is listed after it.

``session.io_binding()`` and ``OrtValue`` bind values to runs as onnxruntime's do; values a
run gives and the next run takes back stay inside the runtime (in place on a GPU where the
plan allows).
"""

from __future__ import annotations

import enum
import os
import warnings
from typing import Any, Dict, List, Optional, Sequence, Union

import numpy as np

from . import _vkml
from ._vkml import (
    ClusterError,
    DeviceError,
    InvalidInput,
    InvalidModel,
    UnsupportedOp,
    VkmlError,
)
from ._iobinding import IOBinding, OrtValue

__all__ = [
    "InferenceSession",
    "NodeArg",
    "SessionOptions",
    "Generator",
    "OrtValue",
    "IOBinding",
    "GraphOptimizationLevel",
    "ExecutionMode",
    "get_available_providers",
    "get_all_providers",
    "get_device",
    "VkmlError",
    "InvalidModel",
    "InvalidInput",
    "UnsupportedOp",
    "DeviceError",
    "ClusterError",
]

__version__ = "0.1.0"

VULKAN = "VulkanExecutionProvider"
CPU = "CPUExecutionProvider"


def get_all_providers() -> List[str]:
    """Every provider VKML knows, available here or not."""
    return [VULKAN, CPU]


def get_available_providers() -> List[str]:
    """The providers this machine can run, best first (Vulkan where a device opens)."""
    return list(_vkml.available_providers())


def get_device() -> str:
    """"GPU" where a Vulkan device opens, else "CPU" (onnxruntime's spelling)."""
    return "GPU" if VULKAN in get_available_providers() else "CPU"


class NodeArg:
    """An input or output of a model: its name, shape (ints, and names of symbolic sizes as
    strings; None where the model declares no shape) and type ("tensor(float)", ...)."""

    __slots__ = ("name", "shape", "type")

    def __init__(self, name: str, shape: Optional[List[Union[int, str]]], type: str):
        self.name = name
        self.shape = shape
        self.type = type

    def __repr__(self) -> str:
        return f"NodeArg(name={self.name!r}, type={self.type!r}, shape={self.shape!r})"


class GraphOptimizationLevel(enum.IntEnum):
    """onnxruntime's graph optimisation levels (VKML always plans fully)."""

    ORT_DISABLE_ALL = 0
    ORT_ENABLE_BASIC = 1
    ORT_ENABLE_EXTENDED = 2
    ORT_ENABLE_ALL = 99


class ExecutionMode(enum.IntEnum):
    """onnxruntime's execution modes (VKML orders ops by their dependencies itself)."""

    ORT_SEQUENTIAL = 0
    ORT_PARALLEL = 1


class SessionOptions:
    """onnxruntime's session options, for scripts that set them: VKML plans and threads on
    its own, so these attributes are kept but do not change how a model runs.

    Config entries named ``vkml.<setting>`` set the runtime's ``VKML_<SETTING>`` for the
    sessions made with these options, over the environment's (README.md lists them), e.g.
    ``add_session_config_entry("vkml.fusion", "0")``; other entries are kept and ignored."""

    def __init__(self) -> None:
        self.graph_optimization_level = GraphOptimizationLevel.ORT_ENABLE_ALL
        self.intra_op_num_threads = 0
        self.inter_op_num_threads = 0
        self.log_severity_level = 2
        self.enable_profiling = False
        self.execution_mode = ExecutionMode.ORT_SEQUENTIAL
        self._config: Dict[str, str] = {}

    def add_session_config_entry(self, config_key: str, config_value: str) -> None:
        self._config[str(config_key)] = str(config_value)

    def get_session_config_entry(self, config_key: str) -> str:
        if config_key not in self._config:
            raise KeyError(f"these SessionOptions have no config entry {config_key!r}")
        return self._config[config_key]

    def _vkml_settings(self) -> List[tuple]:
        """The ``vkml.*`` entries as the runtime's ``VKML_*`` names and values."""
        return [("VKML_" + k[len("vkml."):].upper(), v) for k, v in self._config.items()
                if k.startswith("vkml.")]


def _device(providers: Optional[Sequence[Any]]) -> tuple:
    """(the runtime's device selection, the providers in use) for onnxruntime's providers."""
    available = get_available_providers()
    if providers is None:
        wanted = available
    else:
        # A provider may come as (name, options), as onnxruntime allows.
        wanted = [p[0] if isinstance(p, (tuple, list)) else p for p in providers]
    used = []
    for p in wanted:
        if p not in get_all_providers():
            warnings.warn(f"VKML has no {p}; it is skipped (VKML has {', '.join(get_all_providers())})",
                          stacklevel=3)
        elif p not in available:
            warnings.warn(f"{p} is not available on this machine (no Vulkan device opened); "
                          "it is skipped", stacklevel=3)
        elif p not in used:
            used.append(p)
    if not used:
        raise DeviceError(f"none of the providers {list(wanted)} can run here; "
                          f"available: {', '.join(available)}")
    if used[0] == VULKAN:
        # The CPU backend runs what the GPUs cannot in either case.
        return "vulkan" if CPU not in used else "auto", used
    return "cpu", used


class InferenceSession:
    """A loaded model, onnxruntime's InferenceSession in VKML.

    ``path_or_bytes`` is the .onnx file's path (external data beside it is found) or its
    bytes. ``run`` releases the GIL while the model runs, so threads sharing a session run
    concurrently."""

    def __init__(
        self,
        path_or_bytes: Union[str, bytes, os.PathLike],
        sess_options: Optional[SessionOptions] = None,
        providers: Optional[Sequence[Any]] = None,
        provider_options: Optional[Sequence[Dict[str, Any]]] = None,
        **kwargs: Any,
    ) -> None:
        device, used = _device(providers)
        model = path_or_bytes
        if isinstance(model, os.PathLike):
            model = os.fspath(model)
        if isinstance(model, (bytearray, memoryview)):
            model = bytes(model)
        self._sess_options = sess_options if sess_options is not None else SessionOptions()
        self._sess = _vkml.Session(model, device, self._sess_options._vkml_settings())
        self._providers = used
        self._inputs = [NodeArg(*a) for a in self._sess.inputs()]
        self._outputs = [NodeArg(*a) for a in self._sess.outputs()]

    def get_inputs(self) -> List[NodeArg]:
        return list(self._inputs)

    def get_outputs(self) -> List[NodeArg]:
        return list(self._outputs)

    def get_overridable_initializers(self) -> List[NodeArg]:
        return []

    def get_providers(self) -> List[str]:
        return list(self._providers)

    def get_provider_options(self) -> Dict[str, Dict[str, str]]:
        return {p: {} for p in self._providers}

    def get_session_options(self) -> SessionOptions:
        return self._sess_options

    def run(
        self,
        output_names: Optional[Sequence[str]],
        input_feed: Dict[str, Any],
        run_options: Any = None,
    ) -> List[np.ndarray]:
        """Runs the model on ``input_feed`` (input name -> array) and returns the outputs
        named in ``output_names`` (all, in the model's order, for None) as numpy arrays."""
        names = None if output_names is None else list(output_names)
        return self._sess.run(names, input_feed)

    def io_binding(self) -> IOBinding:
        """A new IOBinding of this session: bind inputs and outputs (OrtValues, numpy arrays),
        then ``run_with_iobinding``."""
        return IOBinding(self)

    def run_with_iobinding(self, iobinding: IOBinding, run_options: Any = None) -> None:
        """Runs the model on ``iobinding``'s inputs, into its outputs (``get_outputs()``).
        Releases the GIL while the model runs."""
        if not isinstance(iobinding, IOBinding) or iobinding._session is not self:
            raise InvalidInput("run_with_iobinding takes an IOBinding of this session "
                               "(session.io_binding())")
        iobinding._b.run()


class Generator:
    """A language model's folder (model.onnx and tokenizer.json, as Optimum and ONNX Runtime
    GenAI's model builder export them), loaded to generate text with VKML's own loop: the
    caches stay where the model runs, updated in place on a GPU. ``providers`` as for
    InferenceSession; ``vkml.cluster`` loads one over a cluster instead."""

    def __init__(self, model_dir: Union[str, os.PathLike],
                 providers: Optional[Sequence[Any]] = None, *, _inner: Any = None) -> None:
        if _inner is not None:
            self._g = _inner
            return
        device, _ = _device(providers)
        self._g = _vkml.Generator(os.fspath(model_dir), device)

    def generate(self, prompt: Union[str, Sequence[int]], max_new_tokens: int = 128,
                 temperature: float = 0.0, top_p: float = 1.0, seed: int = 0,
                 on_text: Optional[Any] = None, ignore_eos: bool = False) -> Dict[str, Any]:
        """Generates after ``prompt`` (text, or token ids): greedy unless ``temperature`` > 0
        (then nucleus sampling with ``top_p``, seeded by ``seed``); ``on_text(piece)`` sees
        the text as it is made (text prompts). Returns a dict with ``tokens``, ``text``,
        ``prompt_tokens``, ``prompt_tokens_per_s``, ``decode_tokens_per_s`` and
        ``stopped_at_eos``. The GIL is released while it runs."""
        if not isinstance(prompt, str):
            prompt = [int(t) for t in prompt]
        return self._g.generate(prompt, max_new_tokens, temperature, top_p, seed, on_text,
                                ignore_eos)


from . import cluster  # noqa: E402 (it uses NodeArg above)
