"""vkml.cluster against three vkml-node processes on loopback (the binary the Rust tests
build: $VKML_NODE_BIN, else target/release/vkml-node)."""

import json
import os
import socket
import subprocess
import time

import pytest

import vkml
import vkml.cluster
from conftest import FIXTURES, REPO, assert_matches, data_sets, in_threads

BIN = os.environ.get("VKML_NODE_BIN", str(REPO / "target" / "release" / "vkml-node"))
MNIST = FIXTURES / "mnist_cnn"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    assert os.path.exists(BIN), f"{BIN}: build it first (cargo build --release --bin vkml-node)"
    home = tmp_path_factory.mktemp("cluster")
    key = home / "cluster.key"
    subprocess.run([BIN, "keygen", "--out", str(key)], check=True, capture_output=True)
    addrs = [f"127.0.0.1:{free_port()}" for _ in range(3)]
    procs = []
    try:
        for i, addr in enumerate(addrs):
            args = [BIN, "--listen", addr, "--name", f"n{i}", "--device", "cpu",
                    "--cluster-key", str(key), "--probe-cache", str(home / f"probe-{i}.json")]
            if i:
                args += ["--join", addrs[0]]
            env = dict(os.environ, XDG_CACHE_HOME=str(home / f"cache-{i}"), RUST_LOG="info")
            log = open(home / f"n{i}.log", "w")
            procs.append(subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env))
        deadline = time.monotonic() + 60
        while True:
            done = subprocess.run([BIN, "status", "--json", "--to", addrs[1], "--cluster-key",
                                   str(key)], capture_output=True, text=True)
            if done.returncode == 0:
                members = json.loads(done.stdout)["members"]
                if sum(m["state"] == "alive" for m in members) == 3:
                    break
            assert time.monotonic() < deadline, "the three nodes did not converge in 60 s:\n" + \
                "\n".join((home / f"n{i}.log").read_text() for i in range(3))
            time.sleep(0.2)
        yield addrs, key
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()


def test_a_model_loaded_through_vkml_cluster_runs_as_a_session(cluster):
    addrs, key = cluster
    stages = []
    with vkml.cluster.connect(addrs[1], key) as c:
        sess = c.load(MNIST / "model.onnx",
                      progress=lambda stage, done, total, node: stages.append(stage))
        assert stages, "no progress was reported"
        (x,) = sess.get_inputs()
        assert x.type == "tensor(float)" and x.shape == [1, 1, 28, 28]
        assert [o.name for o in sess.get_outputs()] == \
            [o.name for o in vkml.InferenceSession(str(MNIST / "model.onnx"),
                                                   providers=["CPUExecutionProvider"]).get_outputs()]
        assert set(sess.nodes()) <= {"n0", "n1", "n2"} and sess.nodes()
        sets = data_sets(MNIST)
        for k, (inputs, outputs) in enumerate(sets):
            (got,) = sess.run(None, {x.name: inputs[0][1]})
            assert_matches(got, outputs[0][1], f"mnist_cnn set {k} over the cluster")
        # Threads share the model; their runs pipeline through the nodes.
        def work(t):
            for i in range(10):
                inputs, outputs = sets[(t + i) % len(sets)]
                (got,) = sess.run([sess.get_outputs()[0].name], {x.name: inputs[0][1]})
                assert_matches(got, outputs[0][1], f"thread {t} run {i}")

        failures = in_threads(4, work)
        assert not failures, failures[:3]
        sess.unload()
        with pytest.raises(vkml.InvalidInput, match="unloaded"):
            sess.run(None, {x.name: sets[0][0][0][1]})


def test_cluster_errors_raise_cluster_error(cluster, tmp_path):
    addrs, key = cluster
    wrong = tmp_path / "other.key"
    subprocess.run([BIN, "keygen", "--out", str(wrong)], check=True, capture_output=True)
    with pytest.raises(vkml.ClusterError):
        vkml.cluster.connect(addrs[0], wrong)
    with pytest.raises(vkml.ClusterError, match="cluster key"):
        vkml.cluster.connect(addrs[0], tmp_path / "missing.key")
    with pytest.raises(vkml.ClusterError):
        vkml.cluster.connect(f"127.0.0.1:{free_port()}", key)
    with vkml.cluster.connect(addrs[0], key) as c:
        with pytest.raises(vkml.InvalidModel):
            c.load(FIXTURES / "malformed" / "truncated.onnx")


def test_a_language_model_generates_over_the_cluster(cluster):
    addrs, key = cluster
    r = json.loads((REPO / "tests" / "models" / "llama_genai" / "reference.json").read_text())
    with vkml.cluster.connect(addrs[2], key) as c:
        gen = c.load_generator(REPO / "tests" / "models" / "llama_genai")
        out = gen.generate(r["prompt_ids"], max_new_tokens=len(r["greedy_ids"]), ignore_eos=True)
        assert out["tokens"] == r["greedy_ids"]
