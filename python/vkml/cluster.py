"""A VKML cluster from Python: connect to any node, load a model over the whole cluster, and
run it with the same calls as an InferenceSession::

    import vkml.cluster

    with vkml.cluster.connect("10.0.0.1:7000", "cluster.key") as c:
        sess = c.load("model.onnx", progress=lambda stage, done, total, node: print(stage))
        outputs = sess.run(None, {"input": x})
"""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

import numpy as np

from . import Generator, NodeArg, _vkml

__all__ = ["connect", "Cluster", "ClusterSession"]

Progress = Callable[[str, int, int, str], Any]


class ClusterSession:
    """A model loaded on a cluster: get_inputs, get_outputs and run as on an
    InferenceSession. Runs from several threads at once pipeline through the nodes."""

    def __init__(self, remote: "_vkml.RemoteSession") -> None:
        self._remote = remote
        self._inputs = [NodeArg(*a) for a in remote.inputs()]
        self._outputs = [NodeArg(*a) for a in remote.outputs()]

    def get_inputs(self) -> List[NodeArg]:
        return list(self._inputs)

    def get_outputs(self) -> List[NodeArg]:
        return list(self._outputs)

    def get_providers(self) -> List[str]:
        return ["VKMLCluster"]

    def nodes(self) -> List[str]:
        """The nodes the model's plan put parts on (empty where its sizes are symbolic and
        each run is planned on its own)."""
        return list(self._remote.nodes())

    def run(self, output_names: Optional[Sequence[str]], input_feed: Dict[str, Any],
            run_options: Any = None) -> List[np.ndarray]:
        names = None if output_names is None else list(output_names)
        return self._remote.run(names, input_feed)

    def unload(self) -> None:
        """Frees the model on every node; later runs raise."""
        self._remote.unload()


class Cluster:
    """A connection to one node of a cluster, which plans and runs models over all of them."""

    def __init__(self, addr: str, key_file: Union[str, os.PathLike]) -> None:
        self._c = _vkml.Cluster(addr, os.fspath(key_file))

    def load(self, path: Union[str, os.PathLike], progress: Optional[Progress] = None) -> ClusterSession:
        """Loads the model at ``path`` (external data beside it goes too) over the cluster;
        ``progress(stage, done_bytes, total_bytes, node)`` is called as it goes."""
        return ClusterSession(self._c.load(os.fspath(path), progress))

    def load_generator(self, model_dir: Union[str, os.PathLike],
                       progress: Optional[Progress] = None) -> Generator:
        """Loads the language model of ``model_dir`` (model.onnx, tokenizer.json) over the
        cluster, each node keeping the caches of the layers it runs; its ``generate`` is
        ``vkml.Generator.generate``."""
        return Generator(model_dir, _inner=self._c.load_generator(os.fspath(model_dir), progress))

    def close(self) -> None:
        """Closes the connection once no model loaded through it is held."""
        self._c.close()

    def __enter__(self) -> "Cluster":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def connect(addr: str, key_file: Union[str, os.PathLike]) -> Cluster:
    """Connects to the node at ``addr`` (host:port) with the cluster's key file (as written by
    ``vkml-node keygen``)."""
    return Cluster(addr, key_file)
