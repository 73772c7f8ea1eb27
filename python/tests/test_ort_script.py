"""ort_example.py, written for onnxruntime, runs on vkml with only its import line changed."""

import pathlib
import subprocess
import sys

from conftest import FIXTURES

HERE = pathlib.Path(__file__).parent


def test_an_onnxruntime_script_runs_with_its_import_changed(tmp_path):
    source = (HERE / "ort_example.py").read_text()
    assert source.count("import onnxruntime as ort\n") == 1
    script = tmp_path / "vkml_example.py"
    script.write_text(source.replace("import onnxruntime as ort\n", "import vkml as ort\n"))
    folder = FIXTURES / "mnist_cnn"
    done = subprocess.run(
        [sys.executable, str(script), str(folder / "model.onnx"), str(folder / "test_data_set_0")],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("matches"), done.stdout
