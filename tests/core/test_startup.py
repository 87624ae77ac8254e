"""What a fresh process pays before its first result (issue 23): an import that imports no
op family, no plugin and no heavy library; op libraries imported when a model first uses
them (``LazyLibrary``, the builtin families' index kept current); onnx's schemas read from
the disk cache; generated code compiled once per process."""
from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
import textwrap

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import dynashape
from dynashape import hookimpl, libindex, onnx_schemas, usercache
from dynashape.errors import PluginContractError, UnsupportedOperatorError
from dynashape.records import LazyLibrary

#: modules ``import dynashape`` must leave unimported (issue 23, item 1)
HEAVY = ("numba", "llvmlite", "onnx", "ml_dtypes", "matplotlib", "ray", "dynashape.ops_builtin.fast",
         "dynashape.session", "dynashape.engine", "dynashape_example")


def _imported_after(code: str, env: dict | None = None) -> set:
    """The module names a fresh interpreter has imported after running ``code``."""
    script = code + "\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))\n"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, env=env)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


#: the plugin packages inside ops_builtin and their lazy indexes: no op family
_NOT_FAMILIES = {"index", "fast", "fast.index", "fast.onednn", "fast.onednn.index"}


def _families(modules: set) -> set:
    prefix = "dynashape.ops_builtin."
    return {m[len(prefix):] for m in modules if m.startswith(prefix)} - _NOT_FAMILIES


def test_import_dynashape_imports_no_op_family_plugin_or_heavy_library():
    modules = _imported_after("import dynashape")
    assert not _families(modules)
    assert not {m for m in modules for h in HEAVY if m == h or m.startswith(h + ".")}


def test_dir_lists_the_lazy_names_without_importing_them():
    """``dir(dynashape)`` (tab completion) shows InferenceSession and onnxruntime's names
    before anything imported the session."""
    modules = _imported_after("import dynashape\nnames = dir(dynashape)\n"
                              "assert {'InferenceSession', 'SessionOptions', 'OrtValue', 'capi'} <= set(names), names")
    assert not {m for m in modules for h in HEAVY if m == h or m.startswith(h + ".")}


_ONNX_FREE_RUN = textwrap.dedent("""
    import json, sys
    import numpy as np
    import dynashape
    s = dynashape.InferenceSession(sys.argv[1])
    (y,) = s.run(None, {"x": np.array([[1.0, -2.0, 3.0]], np.float32)})
    print(json.dumps({"y": y.tolist(), "imported": sorted(m for m in ("onnx", "ml_dtypes", "importlib.metadata")
                                                          if m in sys.modules)}))
""")


def test_a_session_reads_checks_and_runs_a_model_without_importing_onnx(tmp_path):
    # (nor importlib.metadata, ~10 ms a process: the versions and entry points come from the
    # .dist-info folders and the entry-point cache, dynashape.distributions and registry)
    # Constant tensors in raw_data and in typed fields, a Cast, a Shape subgraph, an initializer
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])
    raw = helper.make_tensor("two", TensorProto.FLOAT, [1], np.array([2.0], np.float32).tobytes(), raw=True)
    typed = helper.make_tensor("ten", TensorProto.INT32, [1], [10])
    nodes = [helper.make_node("Constant", [], ["c2"], value=raw),
             helper.make_node("Constant", [], ["c10"], value=typed),
             helper.make_node("Cast", ["c10"], ["c10f"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["x", "c2"], ["m"]), helper.make_node("Add", ["m", "c10f"], ["a"]),
             helper.make_node("Add", ["a", "bias"], ["b"]), helper.make_node("Shape", ["x"], ["shp"]),
             helper.make_node("Reshape", ["b", "shp"], ["y"])]
    bias = helper.make_tensor("bias", TensorProto.FLOAT, [3], [0.5, 0.25, 0.125])
    g = helper.make_graph(nodes, "g", [x], [y], [bias])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    results = []
    for _ in range(2):     # (the first process may fill the schema cache from onnx.defs)
        out = subprocess.run([sys.executable, "-c", _ONNX_FREE_RUN, str(path)], capture_output=True, text=True,
                             check=True, cwd=tmp_path)   # (a directory no concurrent test writes in)
        results.append(json.loads(out.stdout.strip().splitlines()[-1]))
    assert results[0]["y"] == results[1]["y"] == [[12.5, 6.25, 16.125]]      # x * 2 + 10 + bias
    # (a dependency may import importlib.metadata itself: pluggy before 1.5 does, at its import)
    probe = "import sys, numpy, pluggy; print('importlib.metadata' in sys.modules)"
    deps = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True).stdout.strip() == "True"
    assert results[1]["imported"] == (["importlib.metadata"] if deps else [])


def test_building_the_registry_imports_no_op_family():
    # (the example plugin registers records for builtin keys eagerly: their families load at
    # once, to find a clash when the registry is built; it is left out here)
    import os
    env = dict(os.environ, DYNASHAPE_PLUGINS_BLOCK="example")
    modules = _imported_after("import dynashape; dynashape.get_registry()", env)
    assert not _families(modules)
    assert "numba" not in modules


def test_a_session_imports_only_the_families_its_model_uses():
    code = textwrap.dedent("""
        import numpy as np, dynashape
        from onnx import TensorProto, helper
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])
        g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        s = dynashape.InferenceSession(m, optimize=False)
        assert s.run(None, {"x": np.array([-1.0, 2.0], np.float32)})[0].tolist() == [0.0, 2.0]
    """)
    import os
    modules = _imported_after(code, dict(os.environ, DYNASHAPE_PLUGINS_BLOCK="example"))
    families = _families(modules)
    assert "activations" in families
    assert not families & {"control_flow", "rnn", "sequence", "quantization", "attention", "text", "ml", "signal"}
    # nor onnxruntime's value and device classes (their enums: ~2 ms): a feed is no OrtValue
    assert not modules & {"dynashape.ortvalue", "dynashape.devices", "dynashape.iobinding"}


@pytest.mark.parametrize("index_module", ["dynashape.ops_builtin.index", "dynashape.ops_builtin.fast.index",
                                          "dynashape.ops_builtin.fast.onednn.index", "dynashape_example.index"])
def test_each_library_index_is_current(index_module):
    import importlib
    if index_module.startswith("dynashape_example"):
        pytest.importorskip("dynashape_example")
    index = importlib.import_module(index_module).INDEX
    for module, entry in index.items():
        assert libindex.describe(module) == entry, (
            f"{index_module} is stale for {module}: regenerate it with the command in its docstring")


# a third-party plugin's lazy library -------------------------------------------------

_LIBRARY = '''
import numpy as np
from dynashape import OpLibrary, same_dtype
lib = OpLibrary()

@lib.op("Triple", since_version=1, domain="com.lazy", infer_dtype=same_dtype(0))
def _shape(ctx):
    return [ctx.shape(0)]

@lib.kernel("Triple", domain="com.lazy")
def _triple(inputs, outputs, ctx):
    np.multiply(inputs[0], 3, out=outputs[0])
'''


def _triple_model():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])
    g = helper.make_graph([helper.make_node("Triple", ["x"], ["y"], domain="com.lazy")], "g", [x], [y])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.lazy", 1)])


@pytest.fixture
def lazy_plugin(tmp_path, monkeypatch):
    """Registers a plugin whose one library lives in a module written to ``tmp_path``;
    yields (register(keys, source), module name)."""
    monkeypatch.syspath_prepend(str(tmp_path))
    names = []

    def register(keys, source=_LIBRARY, module="lazy_triple_lib"):
        (tmp_path / f"{module}.py").write_text(source)
        sys.modules.pop(module, None)

        class Plugin:
            @staticmethod
            @hookimpl
            def dynashape_register_libraries():
                return [LazyLibrary(module, frozenset(keys))]
        names.append(dynashape.register_plugin(Plugin, name=f"lazy-{len(names)}"))
        return names[-1]

    yield register
    for n in names:
        dynashape.unregister_plugin(n)
    sys.modules.pop("lazy_triple_lib", None)


def test_a_lazy_library_is_imported_at_the_first_lookup_of_its_op(lazy_plugin):
    name = lazy_plugin([("com.lazy", "Triple")])
    registry = dynashape.get_registry()
    assert "lazy_triple_lib" not in sys.modules
    (y,) = dynashape.InferenceSession(_triple_model()).run(None, {"x": np.array([1, -2], np.float32)})
    np.testing.assert_array_equal(y, [3, -6])
    assert "lazy_triple_lib" in sys.modules
    assert registry.resolve_op("com.lazy", "Triple", 1).plugin == name
    assert registry.resolve_kernel("com.lazy", "Triple", 1, np.dtype(np.float32)).plugin == name


def test_a_stale_index_names_the_undeclared_op(lazy_plugin):
    lazy_plugin([("com.lazy", "Triple")], source=_LIBRARY + '''
@lib.kernel("Quadruple", domain="com.lazy")
def _quadruple(inputs, outputs, ctx):
    np.multiply(inputs[0], 4, out=outputs[0])
''')
    with pytest.raises(PluginContractError, match=r"lazy_triple_lib.*com\.lazy::Quadruple.*does not declare"):
        dynashape.InferenceSession(_triple_model())


def test_a_library_that_fails_to_import_is_reported_and_skipped(lazy_plugin):
    lazy_plugin([("com.lazy", "Triple")], source="raise ImportError('no such dependency')\n")
    with pytest.warns(RuntimeWarning, match="lazy_triple_lib.*failed to import.*no such dependency"):
        with pytest.raises(UnsupportedOperatorError, match="Triple"):
            dynashape.InferenceSession(_triple_model())
    assert any("no such dependency" in e for e in dynashape.registry.plugin_load_errors().values())


def test_an_eager_kernel_clashing_with_a_lazy_builtin_one_fails_when_the_registry_is_built():
    from dynashape.records import OpLibrary
    lib = OpLibrary()

    @lib.kernel("Relu", since_version=1)   # priority 0, like the builtin Relu kernel
    def _relu(inputs, outputs, ctx):
        np.maximum(inputs[0], 0, out=outputs[0])

    dynashape.register_plugin(lib.plugin(), name="clashing-relu")
    try:
        with pytest.raises(dynashape.KernelConflictError, match="clashing-relu"):
            dynashape.get_registry()
    finally:
        dynashape.unregister_plugin("clashing-relu")


def test_a_registry_without_a_plugin_shares_what_is_loaded():
    registry = dynashape.get_registry()
    view = registry.without(frozenset({"dynashape.ops_builtin"}))
    assert view is registry.without(frozenset({"dynashape.ops_builtin"}))
    assert registry.resolve_op("", "Relu", 17).plugin == "dynashape.ops_builtin"
    with pytest.raises(UnsupportedOperatorError):
        view.resolve_op("", "Relu", 17)


# onnx's schemas from the disk cache --------------------------------------------------

_VALIDATE = textwrap.dedent("""
    import sys, onnx
    from onnx import helper, TensorProto, defs
    if sys.argv[1] == "no-defs":
        def refuse(*a, **k):
            raise AssertionError("onnx.defs.get_schema was called")
        defs.get_schema = refuse
    from dynashape.model import load_model
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    node = helper.make_node("Relu", ["x"], ["y"], alpha=1.0)   # Relu has no attribute alpha
    m = helper.make_model(helper.make_graph([node], "g", [x], [y]), opset_imports=[helper.make_opsetid("", 17)])
    try:
        load_model(m)
    except Exception as exc:
        print(type(exc).__name__, exc)
""")


def _validate_in_subprocess(cache_dir, mode: str) -> str:
    import os
    env = dict(os.environ, DYNASHAPE_CACHE_DIR=str(cache_dir))
    return subprocess.run([sys.executable, "-c", _VALIDATE, mode], capture_output=True, text=True, check=True,
                          env=env).stdout.strip()


def test_a_second_process_validates_from_the_schema_cache_without_onnx_defs(tmp_path):
    first = _validate_in_subprocess(tmp_path, "defs")
    assert first.startswith("InvalidAttributeError") and "'alpha'" in first
    assert (tmp_path / f"onnx-schemas-{onnx.__version__}" / "ai.onnx" / "Relu.json").exists()
    assert _validate_in_subprocess(tmp_path, "no-defs") == first


def test_a_damaged_schema_cache_is_ignored_and_rewritten(tmp_path):
    path = tmp_path / f"onnx-schemas-{onnx.__version__}" / "ai.onnx" / "Relu.json"
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    out = _validate_in_subprocess(tmp_path, "defs")
    assert out.startswith("InvalidAttributeError")
    assert list(json.loads(path.read_text())) == ["17"]


def test_the_schema_cache_can_be_turned_off(monkeypatch):
    monkeypatch.setenv("DYNASHAPE_CACHE_DIR", "off")
    assert usercache.cache_dir() is None
    schema = onnx_schemas.get_schema("Conv", 17, "")
    assert (schema.since_version, schema.min_input, schema.max_input) == (11, 2, 3)
    assert schema.attributes["group"].type_name == "INT" and not schema.attributes["group"].required
    assert "tensor(float)" in schema.type_constraints["T"]


# generated code ----------------------------------------------------------------------

def test_a_second_session_of_a_model_compiles_no_generated_code(monkeypatch):
    from dynashape import codegen
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Shape", ["r"], ["s"]),
             helper.make_node("Reshape", ["r", "s"], ["y"])]
    m = helper.make_model(helper.make_graph(nodes, "g", [x], [y]), opset_imports=[helper.make_opsetid("", 17)])
    feed = {"x": np.array([[-1, 2, 3]], np.float32)}
    first = dynashape.InferenceSession(m)
    np.testing.assert_array_equal(first.run(None, feed)[0], [[0, 2, 3]])
    compiled = []
    monkeypatch.setattr(codegen, "compile", lambda *a: compiled.append(a) or compile(*a), raising=False)
    second = dynashape.InferenceSession(m)
    np.testing.assert_array_equal(second.run(None, feed)[0], [[0, 2, 3]])
    assert second.program is not first.program   # (a ModelProto is never shared: it compiled its own)
    assert compiled == []


_GENERATED = textwrap.dedent("""
    import sys
    import numpy as np
    from onnx import TensorProto, helper
    import dynashape
    from dynashape import codegen
    codegen.CACHED_SOURCE_CHARS = 0     # (every source through the cache: this model's are short)
    compiled = []
    real = compile
    codegen.compile = lambda *a: compiled.append(a[1]) or real(*a)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Shape", ["r"], ["s"]),
             helper.make_node("Reshape", ["r", "s"], ["y"])]
    m = helper.make_model(helper.make_graph(nodes, "g", [x], [y]), opset_imports=[helper.make_opsetid("", 17)])
    out = dynashape.InferenceSession(m).run(None, {"x": np.array([[-1, 2, 3], [4, -5, 6]], np.float32)})[0]
    print(out.tolist(), len(compiled))
""")


def _generated_in_subprocess(cache_dir) -> str:
    import os
    env = dict(os.environ, DYNASHAPE_CACHE_DIR=str(cache_dir))
    return subprocess.run([sys.executable, "-c", _GENERATED], capture_output=True, text=True, check=True,
                          env=env).stdout.strip()


def test_a_new_process_reads_the_generated_codes_bytecode_from_the_cache(tmp_path):
    first = _generated_in_subprocess(tmp_path)
    values, compiled = first.rsplit(" ", 1)
    assert values == "[[0.0, 2.0, 3.0], [4.0, 0.0, 6.0]]" and int(compiled) > 0
    files = list((tmp_path / "code").rglob("*"))
    assert [f for f in files if f.is_file()]
    assert _generated_in_subprocess(tmp_path) == f"{values} 0"


def test_a_damaged_or_foreign_bytecode_file_is_compiled_again(tmp_path):
    """A file that does not unmarshal, or holds another source under the same checksum, is
    never run: its source is compiled again."""
    import marshal
    values = _generated_in_subprocess(tmp_path).rsplit(" ", 1)[0]
    damaged, *foreign = sorted(f for f in (tmp_path / "code").rglob("*") if f.is_file())
    damaged.write_bytes(b"\x00garbage")
    for path in foreign:
        source, name, code = marshal.loads(path.read_bytes())
        path.write_bytes(marshal.dumps((source + "\n# another source", name, code)))
    assert _generated_in_subprocess(tmp_path) == f"{values} {1 + len(foreign)}"


def test_generated_code_is_compiled_in_process_when_the_cache_is_off(tmp_path):
    values, compiled = _generated_in_subprocess("off").rsplit(" ", 1)
    assert values == "[[0.0, 2.0, 3.0], [4.0, 0.0, 6.0]]" and int(compiled) > 0


def test_a_short_source_is_compiled_without_touching_the_cache(tmp_path, monkeypatch):
    from dynashape import codegen
    monkeypatch.setenv("DYNASHAPE_CACHE_DIR", str(tmp_path))
    source = "def f(x):\n    return x + 1\n"
    assert len(source) < codegen.CACHED_SOURCE_CHARS
    assert codegen._compiled(source, "short-test") is codegen._compiled(source, "short-test")
    assert not (tmp_path / "code").exists()
    long_source = source + "".join(f"v{i} = {i}\n" for i in range(400))
    assert len(long_source) >= codegen.CACHED_SOURCE_CHARS
    codegen._compiled(long_source, "long-test")
    assert len([f for f in (tmp_path / "code").rglob("*") if f.is_file()]) == 1


def test_the_bytecode_cache_keeps_at_most_its_limit_of_files(tmp_path, monkeypatch):
    import os

    from dynashape import codegen
    monkeypatch.setattr(codegen, "CODE_CACHE_FILES", 8)
    monkeypatch.setattr(codegen, "_written", iter(range(0, 10**6, 256)))    # (checks on every write)
    for i in range(12):
        (tmp_path / f"f{i}").write_bytes(b"x")
        os.utime(tmp_path / f"f{i}", (i, i))
    codegen._prune(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"f{i}" for i in range(3, 12))


# the plugins' entry points from the disk cache ----------------------------------------

def test_entry_points_are_read_from_the_cache_until_a_sys_path_directory_changes(tmp_path, monkeypatch):
    """Read once, then from the cache: a changed directory whose distribution metadata is
    the same (a script's own, edited between runs; a site-packages that got a module) keeps
    the cache; one whose metadata changed (a distribution installed, installed again,
    removed), or a new sys.path, reads the metadata again. Each sys.path keeps a file of its
    own: processes with different ones (scripts in two folders) do not evict each other."""
    import os

    from dynashape import registry
    monkeypatch.setenv("DYNASHAPE_CACHE_DIR", str(tmp_path / "cache"))
    site, scripts = tmp_path / "site", tmp_path / "scripts"
    site.mkdir()
    scripts.mkdir()
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.syspath_prepend(str(scripts))
    real = importlib.metadata.entry_points
    reads = []

    def counting(**kwargs):
        reads.append(kwargs)
        return real(**kwargs)
    monkeypatch.setattr(importlib.metadata, "entry_points", counting)
    first = sorted((ep.name, ep.value) for ep in registry._entry_points())
    assert first == sorted((ep.name, ep.value) for ep in real(group="dynashape")) and len(reads) == 1

    def read_again() -> bool:
        before = len(reads)
        assert sorted((ep.name, ep.value) for ep in registry._entry_points()) == first
        return len(reads) > before
    assert not read_again()
    (scripts / "run.py").write_text("")             # the script's directory, edited
    os.utime(scripts, ns=(1, 1))
    assert not read_again()
    assert not read_again()                         # (its new time is in the cache now)
    (site / "new_dist-1.0.dist-info").mkdir()       # a distribution installed there
    os.utime(site, ns=(2, 2))
    assert read_again()
    assert not read_again()
    (site / "other.py").write_text("")              # a directory holding metadata gets a module
    os.utime(site, ns=(3, 3))
    assert not read_again()
    os.utime(site / "new_dist-1.0.dist-info", ns=(5, 5))   # the distribution installed again
    os.utime(site, ns=(6, 6))
    assert read_again()
    (site / "new_dist-1.0.dist-info").rmdir()       # and removed
    os.utime(site, ns=(7, 7))
    assert read_again()
    assert not read_again()
    (scripts / "pkg.egg-info").mkdir()              # metadata appears in the edited directory
    os.utime(scripts, ns=(4, 4))
    assert read_again()
    monkeypatch.syspath_prepend(str(tmp_path))      # another sys.path (a script in another folder)
    assert read_again()
    assert not read_again()
    sys.path.remove(str(tmp_path))                  # back to the first: its file is still there
    assert not read_again()
    assert len(list((tmp_path / "cache" / "entry-points").iterdir())) == 2



def test_a_cache_folder_past_its_bound_keeps_its_newest_files(tmp_path):
    import os

    from dynashape import usercache
    for i in range(68):
        f = tmp_path / f"f{i}.json"
        f.write_text("{}")
        os.utime(f, ns=(i * 10**9, i * 10**9))
    usercache.prune_oldest(tmp_path, 68)
    assert len(list(tmp_path.iterdir())) == 68                        # at the bound: nothing removed
    usercache.prune_oldest(tmp_path, 64)
    kept = sorted(int(p.stem[1:]) for p in tmp_path.iterdir())
    assert kept == list(range(17, 68))                                 # the oldest quarter of 68 gone

# a second session of a model shares what the first compiled --------------------------

def _relu_reshape_model():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    w = onnx.numpy_helper.from_array(np.array([1.0, -2.0, 3.0], np.float32), "w")
    nodes = [helper.make_node("Mul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["y"])]
    return helper.make_model(helper.make_graph(nodes, "g", [x], [y], [w]), opset_imports=[helper.make_opsetid("", 17)])


def test_a_second_session_of_a_file_shares_its_graph_programs_and_plans(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(_relu_reshape_model(), path)
    feed = {"x": np.array([[1, 1, 1], [-1, 2, 0.5]], np.float32)}
    expected = np.maximum(feed["x"] * np.array([1, -2, 3], np.float32), 0)
    first = dynashape.InferenceSession(str(path), optimize=True)
    np.testing.assert_array_equal(first.run(None, feed)[0], expected)
    second = dynashape.InferenceSession(path, optimize=True)
    assert second.graph is first.graph and second.program is first.program
    np.testing.assert_array_equal(second.run(None, feed)[0], expected)
    assert (second.engine.stats.cache_hits, second.engine.stats.cache_misses) == (1, 0)
    # other compile options, or the file changed: compiled anew
    assert dynashape.InferenceSession(path, optimize=False).graph is not first.graph
    assert dynashape.InferenceSession(path, optimize=True, allocator="naive").graph is not first.graph
    m = _relu_reshape_model()
    m.graph.initializer[0].CopyFrom(onnx.numpy_helper.from_array(np.array([2.0, 2.0, 2.0], np.float32), "w"))
    onnx.save(m, path)
    changed = dynashape.InferenceSession(path, optimize=True)
    assert changed.graph is not first.graph
    np.testing.assert_array_equal(changed.run(None, feed)[0], np.maximum(feed["x"] * 2, 0))


def test_sessions_from_equal_bytes_share_and_a_model_proto_never_does():
    m = _relu_reshape_model()
    data = m.SerializeToString()
    a, b = dynashape.InferenceSession(data), dynashape.InferenceSession(bytes(data))
    assert a.graph is b.graph
    assert dynashape.InferenceSession(m).graph is not dynashape.InferenceSession(m).graph


def test_a_second_session_runs_in_the_execution_context_of_the_first_and_counts_its_own_runs():
    data = _relu_reshape_model().SerializeToString()
    w = np.array([1, -2, 3], np.float32)
    x1, x2 = np.array([[1, 1, 1], [-1, 2, 0.5]], np.float32), np.array([[2, -1, 1], [3, 3, 3]], np.float32)
    first = dynashape.InferenceSession(data, optimize=False)   # Mul -> Relu: the product lives in the arena
    y1 = first.run(None, {"x": x1})[0]
    first.run(None, {"x": x1})
    arena = first.arena.buffer
    assert arena.nbytes > 0
    second = dynashape.InferenceSession(data, optimize=False)
    y2 = second.run(None, {"x": x2})[0]
    # the plan, the arena and the buffers bound to it are the first session's: a warm run
    assert second.arena.buffer is arena and len(second.engine._contexts) == 1
    np.testing.assert_array_equal(y2, np.maximum(x2 * w, 0))
    np.testing.assert_array_equal(y1, np.maximum(x1 * w, 0))   # not overwritten by the other session
    assert (first.stats.runs, first.stats.cache_hits, first.stats.cache_misses) == (2, 1, 1)
    assert (second.stats.runs, second.stats.cache_hits, second.stats.cache_misses) == (1, 1, 0)


def test_what_sessions_share_is_released_with_the_last_of_them():
    import gc
    import weakref

    from dynashape import compiled
    data = _relu_reshape_model().SerializeToString()
    s = dynashape.InferenceSession(data)
    ref = weakref.ref(s._compiled)
    del s
    gc.collect()
    assert ref() is None
    assert len(compiled._cache) == 0     # (the fixture cleared it before the test)


# the program's symbolic inference reuses the rewrite pass's -------------------------

def test_nodes_the_rewrites_leave_take_their_inference_from_the_rewrite_pass(monkeypatch):
    from dynashape import symbolic_inference as si
    reused = []
    real = si._Reuse.node
    monkeypatch.setattr(si._Reuse, "node", lambda self, sg, pn: reused.append(real(self, sg, pn)) or reused[-1])
    rng = np.random.default_rng(0)
    w, b = rng.standard_normal((4, 5)).astype(np.float32), rng.standard_normal(5).astype(np.float32)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["mm"]), helper.make_node("Add", ["mm", "b"], ["a"]),
             helper.make_node("Shape", ["a"], ["s"]), helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("Reshape", ["r", "s"], ["y"])]
    inits = [onnx.numpy_helper.from_array(w, "w"), onnx.numpy_helper.from_array(b, "b")]
    m = helper.make_model(helper.make_graph(nodes, "g", [x], [y], inits), opset_imports=[helper.make_opsetid("", 17)])
    sess = dynashape.InferenceSession(m, optimize=True)
    assert sess.rewrites.fired and any(r is not None for r in reused)
    feed = rng.standard_normal((2, 3, 4)).astype(np.float32)
    np.testing.assert_allclose(sess.run(None, {"x": feed})[0], np.maximum(feed @ w + b, 0), rtol=1e-5, atol=1e-6)
