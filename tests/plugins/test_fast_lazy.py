"""The accelerated-kernel plugin imports numba only when a compiled loop is first called:
building the registry, ``dynashape plugins`` / ``ops``, choosing kernels and preparing nodes
import none of it (fresh processes, since numba stays imported once loaded); the first run
of a node with a compiled kernel imports it and matches onnxruntime; loops first called from
several threads at once import once; the plugin registers the same kernels as before the
loops became lazy. And :func:`dynashape.ops_builtin.fast.common.lazy_import` itself, and how the
plugin finds numba without importing it.
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import threading
import types

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import dynashape
from dynashape.ops_builtin import fast as ops_fast
from dynashape.ops_builtin.fast.common import lazy_import

needs_fast = pytest.mark.skipif(not ops_fast.enabled(), reason="the compiled kernels are off or numba is missing")
RNG = np.random.default_rng(3)
F = TensorProto.FLOAT


def _in_fresh_process(code: str, *args: str) -> dict:
    """Run ``code`` in a new interpreter (the environment inherited, DYNASHAPE_FAST too);
    its last line of output is JSON."""
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=dict(os.environ))
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def _reshape_add_model() -> bytes:
    """x (n, 6) -> Reshape (-1, 2, 3) -> + c: no node has a compiled kernel."""
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["r"]), helper.make_node("Add", ["r", "c"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, ["n", 6])],
                          [helper.make_tensor_value_info("y", F, None)],
                          [numpy_helper.from_array(np.array([-1, 2, 3], np.int64), "shape"),
                           numpy_helper.from_array(RNG.standard_normal((2, 3)).astype(np.float32), "c")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _compiled_model() -> bytes:
    """LayerNormalization -> Softmax on x (n, 8), and an LSTM (hidden 4) on s (T, B, 5): float32
    nodes whose chosen kernels are compiled ones."""
    hidden, inp = 4, 5
    inits = [numpy_helper.from_array(RNG.standard_normal(8).astype(np.float32), "scale"),
             numpy_helper.from_array(RNG.standard_normal(8).astype(np.float32), "bias"),
             numpy_helper.from_array((RNG.standard_normal((1, 4 * hidden, inp)) * 0.5).astype(np.float32), "W"),
             numpy_helper.from_array((RNG.standard_normal((1, 4 * hidden, hidden)) * 0.5).astype(np.float32), "R"),
             numpy_helper.from_array(RNG.standard_normal((1, 8 * hidden)).astype(np.float32), "B")]
    nodes = [helper.make_node("LayerNormalization", ["x", "scale", "bias"], ["ln"], axis=-1),
             helper.make_node("Softmax", ["ln"], ["y"], axis=-1),
             helper.make_node("LSTM", ["s", "W", "R", "B"], ["h"], hidden_size=hidden)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, ["n", 8]),
                                       helper.make_tensor_value_info("s", F, ["t", "b", inp])],
                          [helper.make_tensor_value_info("y", F, None), helper.make_tensor_value_info("h", F, None)],
                          inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


_NO_COMPILED_KERNEL = """
import io, json, sys, contextlib
import numpy as np
import dynashape
from dynashape.cli import main
dynashape.get_registry()
with contextlib.redirect_stdout(io.StringIO()):
    main(["plugins"], standalone_mode=False)
    main(["ops"], standalone_mode=False)
sess = dynashape.InferenceSession(open(sys.argv[1], "rb").read())
(y,) = sess.run(None, {"x": np.ones((4, 6), np.float32)})
print(json.dumps({"numba": "numba" in sys.modules, "llvmlite": "llvmlite" in sys.modules, "shape": list(y.shape),
                  "plugins": sorted({st.kernel.plugin for st in sess.program.steps})}))
"""


def test_registry_cli_and_a_model_without_compiled_kernels_import_no_numba(tmp_path):
    """(With the compiled kernels on or off.)"""
    path = tmp_path / "m.onnx"
    path.write_bytes(_reshape_add_model())
    got = _in_fresh_process(_NO_COMPILED_KERNEL, str(path))
    assert got["shape"] == [4, 2, 3] and "fast" not in got["plugins"]
    assert not got["numba"] and not got["llvmlite"]


_ONE_ROW = """
import json, sys
import numpy as np
import dynashape
from onnx import TensorProto, helper, numpy_helper
k, n = int(sys.argv[1]), int(sys.argv[2])
w = np.random.default_rng(0).standard_normal((k, n)).astype(np.float32)
g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["m", k])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [numpy_helper.from_array(w, "w")])
sess = dynashape.InferenceSession(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
x = np.ones((1, k), np.float32)
(y,) = sess.run(None, {"x": x})
from dynashape.ops_builtin.fast.native import gemv
assert gemv.wait_until_ready(300), gemv._LOADING.failed    # (the first run loads it in the background)
(y,) = sess.run(None, {"x": x})
print(json.dumps({"numba": "numba" in sys.modules, "llvmlite": "llvmlite" in sys.modules,
                  "exact": bool(np.allclose(y, x @ w, rtol=1e-4, atol=1e-3)),
                  "plugin": sess.program.steps[0].kernel.plugin}))
"""


@needs_fast
def test_a_one_row_product_never_loads_numba():
    """The oneDNN MatMul streams a single row through the native slab loop (native/gemv,
    machine code mapped without LLVM) at every weight size: an encoder's pooler (384 x 384,
    BERT-large's 1024 x 1024) and a decoder's 768 x 2304 projection load neither numba nor
    llvmlite. (Where oneDNN has no blocked layout, on AVX2-only CPUs, every product runs the
    native column-panel loop: no numba either.)"""
    from dynashape.ops_builtin.fast import onednn
    from dynashape.ops_builtin.fast.onednn import api
    if not onednn.enabled():
        pytest.skip("the oneDNN kernels are off (DYNASHAPE_ONEDNN=0)")
    if api.library() is None:
        pytest.skip(api.unavailable_reason())
    for k, n in (("384", "384"), ("1024", "1024"), ("768", "2304")):
        got = _in_fresh_process(_ONE_ROW, k, n)
        assert got == {"numba": False, "llvmlite": False, "exact": True, "plugin": "onednn"}


_FIRST_RUN = """
import json, sys
import numpy as np
import dynashape
sess = dynashape.InferenceSession(open(sys.argv[1], "rb").read(), compiled_kernels={"fast"})
plugins = {st.kernel.op_type: st.kernel.plugin for st in sess.program.steps}
prepared = {"numba": "numba" in sys.modules, "llvmlite": "llvmlite" in sys.modules}
feeds = dict(np.load(sys.argv[2]))
y, h = sess.run(None, feeds)
np.savez(sys.argv[3], y=y, h=h)
print(json.dumps({"plugins": plugins, "prepared": prepared, "ran": "numba" in sys.modules}))
"""


@needs_fast
def test_preparing_compiled_kernels_imports_no_numba_and_their_first_run_does(tmp_path):
    """Kernel choice, ``prepare`` and ``scratch`` of LayerNormalization, Softmax and LSTM (its
    BLAS lookup included) run without numba; the first run imports it, and its results are
    onnxruntime's."""
    ort = pytest.importorskip("onnxruntime")
    data = _compiled_model()
    (tmp_path / "m.onnx").write_bytes(data)
    feeds = {"x": RNG.standard_normal((3, 8)).astype(np.float32),
             "s": RNG.standard_normal((6, 2, 5)).astype(np.float32)}
    np.savez(tmp_path / "feeds.npz", **feeds)
    got = _in_fresh_process(_FIRST_RUN, *(str(tmp_path / f) for f in ("m.onnx", "feeds.npz", "out.npz")))
    assert got["plugins"] == {"LayerNormalization": "fast", "Softmax": "fast", "LSTM": "fast"}
    assert got["prepared"] == {"numba": False, "llvmlite": False}
    assert got["ran"]
    outputs = np.load(tmp_path / "out.npz")
    want_y, want_h = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
    np.testing.assert_allclose(outputs["y"], want_y, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(outputs["h"], want_h, rtol=1e-5, atol=1e-6)


_THREADS_AT_ONCE = """
import json, sys, threading, types
import numpy as np
import dynashape
from dynashape.ops_builtin.fast import normalization, softmax
sessions = [dynashape.InferenceSession(open(p, "rb").read(), compiled_kernels={"fast"}) for p in sys.argv[1:3]]
assert "numba" not in sys.modules
rng = np.random.default_rng(0)
feeds = [{"x": rng.standard_normal((3, 8)).astype(np.float32)} for _ in range(8)]
start, results, errors = threading.Barrier(8), [None] * 8, []

def run(i):
    start.wait()
    try:
        results[i] = sessions[i % 2].run(None, feeds[i])[0]
    except BaseException as exc:
        errors.append(repr(exc))

threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
same = all(np.array_equal(results[i], sessions[i % 2].run(None, feeds[i])[0]) for i in range(8))
plain = [type(m.loops) is types.ModuleType for m in (normalization, softmax)]
print(json.dumps({"errors": errors, "same": same, "plain": plain}))
"""


@needs_fast
def test_loops_first_called_from_several_threads_at_once_import_once(tmp_path):
    """Eight threads start at once, half on a LayerNormalization model, half on a Softmax
    one, in a process that has imported no loops yet: no error, the results of a later
    serial run, and both loops modules plain modules after."""
    paths = []
    for op, extra in (("LayerNormalization", ["scale"]), ("Softmax", [])):
        g = helper.make_graph([helper.make_node(op, ["x", *extra], ["y"], axis=-1)], "g",
                              [helper.make_tensor_value_info("x", F, ["n", 8])],
                              [helper.make_tensor_value_info("y", F, None)],
                              [numpy_helper.from_array(np.ones(8, np.float32), "scale")] if extra else [])
        paths.append(tmp_path / f"{op}.onnx")
        onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), paths[-1])
    got = _in_fresh_process(_THREADS_AT_ONCE, *map(str, paths))
    assert got == {"errors": [], "same": True, "plain": [True, True]}


#: the plugin's kernels (those it registered before the loops became lazy, and the ones added
#: since): (op, domain, since, end, priority, dtypes, may_inplace)
KERNELS = sorted([
    ("AveragePool", "", 1, None, 10, ["float32", "float64"], ()),
    ("Conv", "", 1, None, 10, ["float32", "float64"], ()),
    ("ConvTranspose", "", 1, None, 10, ["float32", "float64"], ()),
    ("Erf", "", 1, None, 10, ["float32"], ((0, 0),)),
    ("GRU", "", 1, None, 10, ["float32", "float64"], ()),
    ("Gelu", "", 1, None, 10, ["float32"], ((0, 0),)),
    ("GlobalAveragePool", "", 1, None, 10, ["float32", "float64"], ()),
    ("GlobalLpPool", "", 1, None, 10, ["float32", "float64"], ()),
    ("LSTM", "", 1, None, 10, ["float32", "float64"], ()),
    ("LayerNormalization", "", 1, None, 10, ["float32", "float64"], ()),
    ("LpPool", "", 1, None, 10, ["float32", "float64"], ()),
    ("MaxPool", "", 1, None, 10, ["float32", "float64"], ()),
    ("RMSNormalization", "", 1, None, 10, ["float32", "float64"], ()),
    ("RNN", "", 1, None, 10, ["float32", "float64"], ()),
    ("ReduceLogSumExp", "", 1, None, 10, ["float32", "float64"], ()),
    ("Resize", "", 1, None, 10, ["float32", "float64"], ()),
    ("SVMClassifier", "ai.onnx.ml", 1, None, 10, [], ()),
    ("SVMRegressor", "ai.onnx.ml", 1, None, 10, [], ()),
    ("LinearClassifier", "ai.onnx.ml", 1, None, 10, [], ()),
    ("Normalizer", "ai.onnx.ml", 1, None, 10, [], ()),
    ("Softmax", "", 1, None, 10, ["float32", "float64"], ((0, 0),)),
    ("Upsample", "", 1, None, 10, ["float32", "float64"], ()),
    ("FusedAttention", "dynashape", 1, None, 10, ["float32", "float64"], ()),
    ("FusedConv", "dynashape", 1, None, 10, ["float32", "float64"], ()),
    ("FusedMatMul", "dynashape", 1, None, 10, ["float32", "float64"], ()),
    ("TreeEnsembleClassifier", "ai.onnx.ml", 1, None, 10, ["float32", "float64", "int32", "int64"], ()),
    ("TreeEnsembleRegressor", "ai.onnx.ml", 1, None, 10, ["float32", "float64", "int32", "int64"], ()),
])


@needs_fast
def test_the_plugin_registers_the_kernels_it_registered_before():
    reg = dynashape.get_registry()
    got = sorted((k.op_type, k.domain, k.since_version, k.end_version, k.priority, sorted(k.dtypes or []),
                  tuple(tuple(p) for p in k.may_inplace))
                 for domain, op in reg.op_types() for k in reg.kernels(domain, op) if k.plugin == "fast")
    assert got == KERNELS


# ---------------------------------------------------------------------------------------
# lazy_import
# ---------------------------------------------------------------------------------------

@pytest.fixture
def module_dir(tmp_path, monkeypatch):
    """A folder on sys.path for modules that record each run of their code in ``runs.txt``;
    the modules it made are dropped from sys.modules after the test."""
    monkeypatch.syspath_prepend(str(tmp_path))
    made: list = []

    def make(name: str, body: str = "") -> str:
        (tmp_path / f"{name}.py").write_text(
            f"with open({str(tmp_path / 'runs.txt')!r}, 'a') as f:\n    f.write('run\\n')\n{body}\nVALUE = 42\n")
        made.append(name.replace("/", "."))
        return name
    make.made = made
    make.runs = lambda: (tmp_path / "runs.txt").read_text().count("run") if (tmp_path / "runs.txt").exists() else 0
    yield make
    for name in made:
        sys.modules.pop(name, None)


def test_lazy_import_runs_the_module_at_its_first_attribute_read(module_dir):
    name = module_dir("lazy_first_read")
    module = lazy_import(name)
    assert sys.modules[name] is module and module_dir.runs() == 0
    assert module.__name__ == name and module.__file__.endswith(f"{name}.py") and module_dir.runs() == 0
    assert isinstance(module, types.ModuleType) and module_dir.runs() == 0
    assert module.VALUE == 42 and module_dir.runs() == 1
    assert type(module) is types.ModuleType   # (a plain module from then on)
    assert module.VALUE == 42 and lazy_import(name) is module and module_dir.runs() == 1


def test_a_lazy_submodule_is_bound_to_its_package_and_importing_it_does_not_run_it(module_dir, tmp_path):
    """(What the kernel modules do: ``lazy_import(".loops.conv", __package__)``.)"""
    (tmp_path / "lazy_pkg").mkdir()
    (tmp_path / "lazy_pkg" / "__init__.py").write_text("")
    name = module_dir("lazy_pkg/sub").replace("/", ".")
    module_dir.made.append("lazy_pkg")
    module = lazy_import(".sub", "lazy_pkg")
    import lazy_pkg
    import lazy_pkg.sub
    from lazy_pkg import sub
    assert lazy_pkg.sub is sub is module is sys.modules[name] and module_dir.runs() == 0
    assert sub.VALUE == 42 and module_dir.runs() == 1


def test_threads_reading_a_lazy_module_at_once_run_it_once(module_dir):
    """Eight threads read an attribute of a module whose code takes 0.2 s: each gets it
    (none sees the module half-run), and the code runs once."""
    name = module_dir("lazy_slow", "import time\ntime.sleep(0.2)")
    module = lazy_import(name)
    start, got = threading.Barrier(8), []

    def read():
        start.wait()
        try:
            got.append(module.VALUE)
        except BaseException as exc:  # noqa: BLE001 - recorded, asserted below
            got.append(exc)
    threads = [threading.Thread(target=read) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == [42] * 8 and module_dir.runs() == 1


def test_a_lazy_module_whose_code_raises_raises_at_each_read(module_dir):
    name = module_dir("lazy_broken", "raise ImportError('broken on purpose')")
    module = lazy_import(name)
    for runs in (1, 2):
        with pytest.raises(ImportError, match="broken on purpose"):
            module.VALUE  # noqa: B018
        assert module_dir.runs() == runs


def test_lazy_import_of_an_imported_module_is_that_module_and_of_a_missing_one_raises():
    assert lazy_import("json") is json
    with pytest.raises(ModuleNotFoundError, match="no_such_module_here"):
        lazy_import("no_such_module_here")


# ---------------------------------------------------------------------------------------
# finding numba without importing it
# ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("requirement,version,broken", [
    ("numpy<2.6,>=1.22", (2, 4, 6), ""), ("numpy<2.6,>=1.22", (2, 6, 0), "<2.6"),
    ("numpy<2.6,>=1.22", (1, 21, 5), ">=1.22"), ("numpy <=2.5, >1.21 ; python_version >= '3.10'", (2, 5, 9), ""),
    ("numpy>=1.24", (1, 23), ">=1.24"), ("numpy (<2.6)", (3, 0), ""), ("numpy", (2, 0), ""),
])
def test_a_bound_of_numbas_numpy_requirement_is_read(requirement, version, broken):
    """(Only <, <=, >, >= bounds are read; another form is taken as no bound.)"""
    assert ops_fast._bound_broken(requirement, version) == broken


@pytest.mark.skipif(importlib.util.find_spec("numba") is None, reason="numba is not installed")
def test_a_numba_too_old_or_refusing_this_numpy_turns_the_plugin_off(monkeypatch):
    """numba's version and numpy bound as its .dist-info folder says (dynashape.distributions),
    and as its metadata says where no such folder is found."""
    from importlib import metadata

    from dynashape import distributions

    def installed(version: str, numpy: str):
        requires = ["llvmlite<0.51,>=0.50", numpy]
        monkeypatch.setattr(distributions, "version", lambda name: version)
        monkeypatch.setattr(distributions, "requires", lambda name: requires)
    monkeypatch.delitem(sys.modules, "numba", raising=False)   # (so that its metadata is read)
    installed("0.68.1", "numpy<2.6,>=1.22")
    assert ops_fast._availability() == (True, "")
    installed("0.59.1", "numpy<2.6,>=1.22")
    assert ops_fast._availability() == (False, "numba 0.59.1 is older than 0.60: pip install 'dynashape[fast]'")
    installed("0.68.1", "numpy<1.27,>=1.22")
    assert ops_fast._availability() == (
        False, f"numba 0.68.1 does not support numpy {np.__version__} (it needs numpy<1.27)")
    monkeypatch.setattr(distributions, "version", lambda name: None)      # no .dist-info folder: the metadata
    dist = types.SimpleNamespace(version="0.59.1", requires=["numpy<2.6,>=1.22"])
    monkeypatch.setattr(metadata, "distribution", lambda name: dist)
    assert ops_fast._availability() == (False, "numba 0.59.1 is older than 0.60: pip install 'dynashape[fast]'")
