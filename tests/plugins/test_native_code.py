"""Machine code built once and run without LLVM in the process (``dynashape.ops_builtin.fast.native``):
the object's ``.text`` is taken only when it is self-contained (no relocations), a cache entry
that is damaged or absent is built again by a child process, the cache off still works, and
a session whose GEMMs run the native panel loop never imports numba or llvmlite and matches
numpy. The loop's values against ONNX Runtime and the numpy kernels at odd sizes, epilogues
and threads: ``test_onednn_kernels.py`` (``_force_panels``)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from dynashape.ops_builtin.fast.native import machine_code, panels

if not machine_code.supported():
    pytest.skip("native code needs x86-64 Linux with AVX2 and FMA, and llvmlite", allow_module_level=True)


def _ir(body: str) -> str:
    return textwrap.dedent(body)


def test_an_object_whose_text_has_relocations_is_refused():
    """A call to a library function leaves a relocation in ``.text``: the code would not run
    where it is mapped, so the build refuses it (and the kernels keep their other paths)."""
    ir = _ir("""
        declare void @external(i64)
        define void @f(i64 %x) {
          call void @external(i64 %x)
          ret void
        }
    """)
    with pytest.raises(ValueError, match="relocations"):
        machine_code.text_and_symbols(machine_code.compile_object(ir), ["f"])


def test_a_self_contained_function_runs_from_its_text():
    """``f(a, n)`` writes ``a[0] = 3 n`` and ``a[1] = n + 1``: compiled, cut out of the
    object, mapped read + execute and called through ctypes. (A loop LLVM vectorises would
    read its constants from a pool: refused, as above.)"""
    import ctypes
    ir = _ir("""
        define void @f(i64 %a, i64 %n) {
          %p = inttoptr i64 %a to i64*
          %v = mul i64 %n, 3
          store i64 %v, i64* %p
          %q = getelementptr i64, i64* %p, i64 1
          %w = add i64 %n, 1
          store i64 %w, i64* %q
          ret void
        }
    """)
    code, offsets = machine_code.text_and_symbols(machine_code.compile_object(ir), ["f"])
    with pytest.raises(ValueError, match="lacks"):
        machine_code.text_and_symbols(machine_code.compile_object(ir), ["g"])
    f = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64)(machine_code.load(code, offsets)["f"])
    out = np.full(3, -1, np.int64)
    f(out.ctypes.data, 5)
    assert out.tolist() == [15, 6, -1]


def test_a_damaged_or_absent_entry_is_built_again(tmp_path, monkeypatch):
    monkeypatch.setenv("DYNASHAPE_CACHE_DIR", str(tmp_path))
    name = f"{panels.__package__}.panels_ir"
    key = machine_code.cache_key(name, (panels.__file__,))
    entry = tmp_path / "native" / f"{key}.bin"
    first = machine_code.built_functions(name, panels.FUNCTIONS, depends=(panels.__file__,))
    assert set(first) == set(panels.FUNCTIONS) and machine_code.read_entry(entry) is not None
    good = entry.read_bytes()
    entry.write_bytes(good[:len(good) // 2])             # cut short: read as absent, rebuilt
    assert machine_code.read_entry(entry) is None
    machine_code.built_functions(name, panels.FUNCTIONS, depends=(panels.__file__,))
    assert entry.read_bytes() == good                    # the same build: deterministic
    monkeypatch.setenv("DYNASHAPE_CACHE_DIR", "off")     # no cache: built into a temporary directory
    assert set(machine_code.built_functions(name, panels.FUNCTIONS, depends=(panels.__file__,))) == \
        set(panels.FUNCTIONS)


_SESSION = textwrap.dedent("""
    import json, sys
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper
    import dynashape
    from dynashape.ops_builtin.fast.onednn import gemm
    gemm._row_major_layout = lambda md: True          # (column panels on every CPU)
    rng = np.random.default_rng(0)
    w = rng.standard_normal((96, 70)).astype(np.float32)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 96])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g", [x], [y],
                          [numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    s = dynashape.InferenceSession(m.SerializeToString(), wait_for_compiled_kernels=True)
    (packed,) = [st.prepacked for st in s.program.steps if st.prepacked is not None]
    errors = []
    for n in (1, 7, 64):
        a = rng.standard_normal((n, 96)).astype(np.float32)
        errors.append(float(np.abs(s.run(None, {"x": a})[0] - a.astype(np.float64) @ w).max()))
    print(json.dumps({"panels": packed.panels is not None, "native": gemm.native_panels._LOADING.is_ready,
                      "errors": errors, "numba": "numba" in sys.modules, "llvmlite": "llvmlite" in sys.modules}))
""")


def test_a_session_on_the_native_loop_loads_neither_numba_nor_llvmlite(tmp_path):
    from dynashape.ops_builtin.fast import onednn
    from dynashape.ops_builtin.fast.onednn import api
    if not onednn.enabled() or api.library() is None:
        pytest.skip("the oneDNN kernels (whose GEMM runs the panel loop) are off or missing")
    env = dict(os.environ, DYNASHAPE_CACHE_DIR=str(tmp_path))      # (an empty cache: the child builds it)
    env.pop("DYNASHAPE_COMPILED_WAIT", None)
    out = subprocess.run([sys.executable, "-c", _SESSION], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["panels"] and r["native"]
    assert max(r["errors"]) < 1e-4
    assert not r["numba"] and not r["llvmlite"]
