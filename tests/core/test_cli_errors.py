"""The command line guides a newcomer: every mistake (missing or non-ONNX model, dims not
given, bad numbers, unknown dim / input names, missing or wrong --input files, an ONNX Runtime
failure, an unwritable plot) is one ``Error: ...`` line naming the option, name or file, with a
non-zero exit code and no traceback; random feeds follow the rules of ``random_feeds``."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

import dynashape
from dynashape.cli import main
from dynashape.feeds import index_bounds, random_feeds

WORDS, NARROW, TYPES = 7, 5, 2  # rows of the Gather tables of the embedding model
IDS = np.array([[1, 2, 3], [4, 0, 1]], np.int64)
#: sum of ``hidden`` for IDS, mask ones, type ids zeros: words[i] = 4i..4i+3 sums to 16 i + 6,
#: types[0] adds 0.5 to each of the 24 elements: 16 * 11 + 6 * 6 + 12
HIDDEN_SUM = 224


def embedding_model() -> onnx.ModelProto:
    """input_ids / attention_mask / token_type_ids int64[batch, sequence] (a BERT-like front):
    ``words`` (7x4) gathered by Cast(input_ids); ``narrow`` (3x5) gathered along axis 1 by
    Reshape(input_ids, [-1]) (so input_ids must lie in [0, 5)); ``types`` (2x4) gathered by
    token_type_ids; the sum masked by attention_mask."""
    ids = ["input_ids", "attention_mask", "token_type_ids"]
    inits = [numpy_helper.from_array(np.arange(WORDS * 4, dtype=np.float32).reshape(WORDS, 4), "words"),
             numpy_helper.from_array(np.ones((3, NARROW), np.float32), "narrow"),
             numpy_helper.from_array(np.array([[0.5] * 4, [100.0] * 4], np.float32), "types"),
             numpy_helper.from_array(np.array([-1], np.int64), "flat")]
    nodes = [helper.make_node("Cast", ["input_ids"], ["ids64"], to=TensorProto.INT64),
             helper.make_node("Gather", ["words", "ids64"], ["word_vec"]),
             helper.make_node("Reshape", ["input_ids", "flat"], ["ids_flat"]),
             helper.make_node("Gather", ["narrow", "ids_flat"], ["narrow_vec"], axis=1),
             helper.make_node("Gather", ["types", "token_type_ids"], ["type_vec"]),
             helper.make_node("Add", ["word_vec", "type_vec"], ["summed"]),
             helper.make_node("Cast", ["attention_mask"], ["maskf"], to=TensorProto.FLOAT),
             helper.make_node("Unsqueeze", ["maskf", "last"], ["mask3"]),
             helper.make_node("Mul", ["summed", "mask3"], ["hidden"])]
    inits.append(numpy_helper.from_array(np.array([-1], np.int64), "last"))
    graph = helper.make_graph(
        nodes, "embed", [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "sequence"]) for n in ids],
        [helper.make_tensor_value_info("hidden", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("narrow_vec", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def image_model() -> onnx.ModelProto:
    """One input ``x`` float32[N, 3, ?, W] (axis 2 unknown: no dim_param) -> Relu -> ``y``."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, None, "W"])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "image", [x],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def flags_model() -> onnx.ModelProto:
    """``flags`` bool[k] and ``counts`` int32[k] (no Gather) -> Where(flags, counts, 0)."""
    graph = helper.make_graph(
        [helper.make_node("Where", ["flags", "counts", "zero"], ["picked"])], "flags",
        [helper.make_tensor_value_info("flags", TensorProto.BOOL, ["k"]),
         helper.make_tensor_value_info("counts", TensorProto.INT32, ["k"])],
        [helper.make_tensor_value_info("picked", TensorProto.INT32, None)],
        [numpy_helper.from_array(np.array(0, np.int32), "zero")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture
def files(tmp_path):
    """Paths of the tiny models, a non-ONNX file and .npy / .npz inputs."""
    paths = {}
    for name, model in (("embed", embedding_model()), ("image", image_model()), ("flags", flags_model())):
        paths[name] = str(tmp_path / f"{name}.onnx")
        onnx.save(model, paths[name])
    paths["text"] = str(tmp_path / "notes.onnx")
    (tmp_path / "notes.onnx").write_text("not a model\n")
    ids = IDS
    np.save(tmp_path / "ids.npy", ids)
    np.save(tmp_path / "ids_f64.npy", ids.astype(np.float64))
    np.save(tmp_path / "ids_1d.npy", ids[0])
    np.savez(tmp_path / "feeds.npz", input_ids=ids, attention_mask=np.ones_like(ids), token_type_ids=ids * 0)
    np.savez(tmp_path / "typo.npz", input_idz=ids)
    (tmp_path / "garbage.npy").write_bytes(b"\x00 not numpy")
    np.save(tmp_path / "x.npy", np.full((1, 3, 2, 2), -2.0, np.float32))
    for key in ("ids", "ids_f64", "ids_1d", "feeds", "typo", "garbage", "x"):
        paths[key] = str(tmp_path / f"{key}.np{'z' if key in ('feeds', 'typo') else 'y'}")
    paths["missing"] = str(tmp_path / "missing.npy")
    return paths


def _invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def error_line(result) -> str:
    """The one ``Error:`` line of a failed command (exit code != 0, no traceback)."""
    assert result.exit_code != 0, result.output
    assert isinstance(result.exception, SystemExit), repr(result.exception)  # not an uncaught exception
    assert "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and result.output.rstrip().endswith(errors[0]), result.output
    return errors[0]


# --- the model argument ----------------------------------------------------------------------

@pytest.mark.parametrize("command", ["run", "plan", "inspect"])
def test_a_missing_model_file_is_a_usage_error(command, tmp_path):
    result = _invoke(command, tmp_path / "nope.onnx")
    assert result.exit_code == 2
    assert "nope.onnx" in error_line(result) and "does not exist" in error_line(result)


@pytest.mark.parametrize("command", ["run", "plan", "inspect"])
def test_a_file_that_is_not_onnx_is_one_error_line(command, files):
    line = error_line(_invoke(command, files["text"]))
    assert "could not parse the ONNX model" in line
    if command == "run":
        assert f"cannot load '{files['text']}'" in line


# --- dims --------------------------------------------------------------------------------------

@pytest.mark.parametrize("command", ["run", "plan"])
def test_dims_not_given_list_every_input_and_the_options_that_fix_them(command, files):
    result = _invoke(command, files["embed"])
    assert result.exit_code == 2
    line = error_line(result)
    assert "no value for the dim(s) batch, sequence" in line
    for name in ("input_ids", "attention_mask", "token_type_ids"):
        assert f"{name} int64[batch, sequence]" in line and f"--shape {name}=NxN" in line
    assert "--dim batch=N --dim sequence=N" in line


def test_an_unknown_dim_is_named_input_axis_with_its_declared_shape(files):
    line = error_line(_invoke("run", files["image"], "--dim", "N=1", "--dim", "W=4"))
    assert "no value for the dim(s) x:2" in line and "x float32[N, 3, ?, W]" in line
    assert "--dim x:2=N" in line and "--shape x=Nx3xNxN" in line


def test_an_unknown_dim_given_as_input_axis_runs(files):
    result = _invoke("run", files["image"], "--dim", "N=2", "--dim", "x:2=5", "--dim", "W=4", "--compare-ort")
    assert result.exit_code == 0, result.output
    assert "input  x: float32[2, 3, 5, 4]" in result.output
    assert "output y: float32[2, 3, 5, 4]" in result.output and "max_abs_diff_vs_ort=0" in result.output


@pytest.mark.parametrize("args, option, words", [
    (("--dim", "batch=abc"), "--dim", "'batch=abc': 'abc' is not a non-negative integer"),
    (("--dim", "batch=-1"), "--dim", "'-1' is not a non-negative integer"),
    (("--dim", "batch"), "--dim", "expected NAME=VALUE, got 'batch'"),
    (("--dim", "=3"), "--dim", "expected NAME=VALUE, got '=3'"),
    (("--shape", "input_ids=1xa"), "--shape", "'input_ids=1xa': 'a' is not a non-negative integer"),
    (("--shape", "input_ids"), "--shape", "expected NAME=VALUE"),
])
@pytest.mark.parametrize("command", ["run", "plan"])
def test_a_bad_number_or_pair_is_a_bad_parameter_naming_the_option(command, files, args, option, words):
    result = _invoke(command, files["embed"], "--dim", "sequence=3", *args)
    assert result.exit_code == 2
    line = error_line(result)
    assert f"Invalid value for '{option}'" in line and words in line


@pytest.mark.parametrize("command", ["run", "plan"])
def test_an_unknown_dim_name_lists_the_dim_params(command, files):
    line = error_line(_invoke(command, files["embed"], "--dim", "batch=1", "--dim", "seqence=3"))
    assert "Invalid value for '--dim'" in line
    assert "'seqence' is not a dim of the model: its dim_params are batch, sequence" in line


def test_a_dim_of_a_fixed_axis_is_refused(files):
    line = error_line(_invoke("run", files["image"], "--dim", "x:1=4"))
    assert "'x:1': that axis is fixed to 3" in line and "x float32[N, 3, ?, W]" in line


def test_an_unknown_shape_name_lists_the_inputs(files):
    line = error_line(_invoke("run", files["image"], "--shape", "image=1x3x4x4"))
    assert "Invalid value for '--shape'" in line
    assert "'image' is not an input of the model: its inputs are x float32[N, 3, ?, W]" in line


def test_a_shape_of_the_wrong_rank_or_fixed_dim_names_the_input(files):
    line = error_line(_invoke("run", files["image"], "--shape", "x=1x4x2x2"))
    assert "Invalid value for '--shape': x=1x4x2x2: input 'x', axis 1: expected 3" in line
    line = error_line(_invoke("run", files["image"], "--shape", "x=1x3x2"))
    assert "x=1x3x2: input 'x': expected rank 4" in line


# --- --input files ------------------------------------------------------------------------------

def test_input_npz_feeds_every_input_by_name(files):
    result = _invoke("run", files["embed"], "--input", files["feeds"])
    assert result.exit_code == 0, result.output
    assert f"output hidden: float32[2, 3, 4] checksum={HIDDEN_SUM}" in result.output


def test_one_input_file_binds_the_dims_of_the_random_inputs(files):
    result = _invoke("run", files["embed"], "--input", f"input_ids={files['ids']}", "--compare-ort")
    assert result.exit_code == 0, result.output
    assert "input  attention_mask: int64[2, 3]" in result.output
    assert "input  token_type_ids: int64[2, 3]" in result.output
    # random attention_mask = ones, token_type_ids = zeros: the same sum as the npz above
    assert f"checksum={HIDDEN_SUM} max_abs_diff_vs_ort=0" in result.output


def test_a_bare_npy_feeds_a_one_input_model(files):
    result = _invoke("run", files["image"], "--input", files["x"])
    assert result.exit_code == 0, result.output
    assert "input  x: float32[1, 3, 2, 2]" in result.output and "checksum=0" in result.output


@pytest.mark.parametrize("item, words", [
    ("{missing}", "file '{missing}' does not exist"),
    ("input_ids={missing}", "file '{missing}' does not exist"),
    ("{typo}", "'{typo}' has arrays ['input_idz'] that are not inputs of the model: its inputs are "
             "input_ids int64[batch, sequence]"),
    ("{ids}", "a bare '{ids}' needs a model with one input, this one has 3: write --input NAME={ids}"),
    ("input_idz={ids}", "'input_idz' is not an input of the model: its inputs are input_ids"),
    ("input_ids={garbage}", "cannot read '{garbage}' as .npy / .npz"),
    ("input_ids={feeds}", "'{feeds}' holds several arrays (.npz)"),
    ("input_ids={ids_f64}", "'{ids_f64}': input 'input_ids': expected tensor(int64) (numpy int64), got numpy float64"),
    ("input_ids={ids_1d}", "'{ids_1d}': input 'input_ids': expected rank 2"),
])
@pytest.mark.parametrize("command", ["run", "plan"])
def test_input_file_errors_name_the_file_and_the_input(command, files, item, words):
    result = _invoke(command, files["embed"], "--input", item.format(**files))
    assert result.exit_code == 2
    line = error_line(result)
    assert line.startswith("Error: Invalid value for '--input': ") and words.format(**files) in line


# --- ONNX Runtime, options of run, the plot -------------------------------------------------------

def test_an_onnx_runtime_failure_prints_dynashape_outputs_then_one_error_line(files, tmp_path):
    # dynashape's own fused op (domain "dynashape"): dynashape runs it, ONNX Runtime refuses it
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 2, 2])
    graph = helper.make_graph([helper.make_node("FusedMatMul", ["x", "x"], ["y"], domain="dynashape")], "fused", [x],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("dynashape", 1)])
    onnx.save(model, tmp_path / "fused.onnx")
    result = _invoke("run", tmp_path / "fused.onnx", "--shape", "x=1x3x2x2", "--compare-ort")
    assert result.exit_code == 1
    assert "output y: float32[1, 3, 2, 2]" in result.output
    assert error_line(result).startswith("Error: ONNX Runtime failed: ") and "FusedMatMul" in result.output


def test_repeat_below_one_is_refused(files):
    line = error_line(_invoke("run", files["image"], "--shape", "x=1x3x2x2", "--repeat", "0"))
    assert "Invalid value for '--repeat'" in line


def test_an_unwritable_plot_is_one_error_line(files):
    pytest.importorskip("matplotlib")
    line = error_line(_invoke("plan", files["image"], "--shape", "x=1x3x2x2", "--plot", "/nonexistent/dir/p.png"))
    assert "/nonexistent/dir/p.png" in line


def test_run_help_says_how_feeds_are_chosen():
    out = _invoke("run", "--help").output
    assert "--dim INPUT:AXIS=N" in out and "[0, rows of the table along the Gather axis)" in out
    assert "*type_ids* / *token_type* integers  zeros" in out and "N(0, 1)" in out


# --- random_feeds ---------------------------------------------------------------------------------

def test_index_bounds_are_the_fewest_rows_along_each_gather_axis():
    graph = dynashape.model.load_model(embedding_model()).graph
    # input_ids: words (7 rows, axis 0, through Cast) and narrow (5 along axis 1, through Reshape)
    assert index_bounds(graph) == {"input_ids": NARROW, "token_type_ids": TYPES}


def test_random_feeds_index_tables_and_fill_masks_and_type_ids():
    sess = dynashape.InferenceSession(embedding_model())
    feeds = random_feeds(sess, {"batch": 4, "sequence": 64}, seed=3)
    ids = feeds["input_ids"]
    assert ids.dtype == np.int64 and ids.shape == (4, 64)
    assert np.array_equal(np.unique(ids), np.arange(NARROW))  # 256 draws cover [0, 5) and nothing else
    assert np.array_equal(feeds["attention_mask"], np.ones((4, 64), np.int64))
    assert np.array_equal(feeds["token_type_ids"], np.zeros((4, 64), np.int64))
    hidden, narrow = sess.run(None, feeds)  # valid indices: the model runs
    assert narrow.shape == (3, 256) and np.sum(narrow) == 3 * 256


def test_random_feeds_other_integers_bools_and_floats():
    feeds = random_feeds(dynashape.InferenceSession(flags_model()), {"k": 500}, seed=0)
    assert feeds["counts"].dtype == np.int32 and np.array_equal(np.unique(feeds["counts"]), np.arange(10))
    assert feeds["flags"].dtype == np.bool_ and 200 < int(np.sum(feeds["flags"])) < 300
    x = random_feeds(dynashape.InferenceSession(image_model()), {"N": 10, "x:2": 10, "W": 10}, seed=0)["x"]
    assert x.dtype == np.float32 and x.shape == (10, 3, 10, 10)
    assert abs(float(np.mean(x))) < 0.1 and abs(float(np.std(x)) - 1.0) < 0.1  # N(0, 1) over 3000 draws


def test_random_feeds_keep_given_arrays_and_take_their_dims():
    ids = np.array([[1, 2, 3]], np.int64)
    feeds = random_feeds(dynashape.InferenceSession(embedding_model()), given={"input_ids": ids})
    assert feeds["input_ids"] is ids and feeds["attention_mask"].shape == (1, 3)


def test_random_feeds_without_a_dim_raise_invalid_feed_error_listing_the_inputs():
    with pytest.raises(dynashape.InvalidFeedError, match=r"no value for dim\(s\) 'N', 'x:2', 'W' of the inputs "
                                                         r"x float32\[N, 3, \?, W\]"):
        random_feeds(dynashape.InferenceSession(image_model()))


def test_a_sequence_input_is_named_instead_of_a_traceback(tmp_path):
    """Random feeds are tensors: a seq(tensor(float)) input gets a one-line error naming it,
    from the CLI and from random_feeds."""
    seq = helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, None)
    graph = helper.make_graph([helper.make_node("SequenceLength", ["s"], ["n"])], "g", [seq],
                              [helper.make_tensor_value_info("n", TensorProto.INT64, [])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "seq.onnx"
    path.write_bytes(model.SerializeToString())
    result = CliRunner().invoke(main, ["run", str(path)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "'s' (seq(tensor(float)))" in result.output and "sequence/optional" in result.output
    with pytest.raises(dynashape.InvalidFeedError, match=r"'s' \(seq\(tensor\(float\)\)\)"):
        random_feeds(dynashape.InferenceSession(model))


# --- sizes over the memory limit: refused before anything is allocated (issue 24) -----------

# (the peak RSS from /proc: getrusage's ru_maxrss keeps the forking parent's peak across exec)
_HUGE_RUN = """
import sys
from click.testing import CliRunner
from dynashape.cli import main
result = CliRunner().invoke(main, sys.argv[1:])
print("EXIT", result.exit_code)
hwm = [line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM:")]
print("RSS_KB", hwm[0] if hwm else 0)
print(result.output)
"""


@pytest.mark.parametrize("command", ["run", "bench", "profile", "plan"])
@pytest.mark.parametrize("model,dims", [("embed", ["batch=1000000000", "sequence=4"]),
                                        ("image", ["N=1000000000", "x:2=8", "W=8"]),
                                        ("embed", ["batch=300000000", "sequence=4"])])
def test_a_size_over_the_memory_limit_is_one_usage_error_before_any_allocation(command, model, dims, files,
                                                                                tmp_path):
    import subprocess
    import sys
    args = [command, files[model]] + [a for d in dims for a in ("--dim", d)]
    if command == "profile":
        args += ["--output", str(tmp_path / "trace.json")]
    env = dict(__import__("os").environ, DYNASHAPE_MEMORY_LIMIT="4GiB")
    out = subprocess.run([sys.executable, "-c", _HUGE_RUN, *args], capture_output=True, text=True, env=env,
                         timeout=120)
    lines = out.stdout.splitlines()
    assert lines[0] == "EXIT 2", out.stdout + out.stderr
    rss_mib = int(lines[1].split()[1]) / 1024
    assert rss_mib < 1024, rss_mib          # 300M x 4 int64s alone would be 9.6 GB
    text = "\n".join(lines[2:])
    assert "Traceback" not in text and "memory_limit" in text, text
    errors = [line for line in text.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, text


def test_feeds_that_fit_but_a_plan_that_does_not_are_refused_by_the_plan_check():
    """x float32[n] expanded to [1000, n]: n = 10^6 is 4 MB of feeds and a 4 GB output."""
    from dynashape.errors import ResourceLimitError
    from dynashape.feeds import check_feeds_fit, placeholder_feeds
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    shape = numpy_helper.from_array(np.array([1000, 1], np.int64), "shape")
    g = helper.make_graph([helper.make_node("Expand", ["x", "shape"], ["y"])], "g", [x], [y], [shape])
    sess = dynashape.InferenceSession(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]),
                                      memory_limit="1GiB")
    feeds = placeholder_feeds(sess, {"n": 1_000_000})
    assert feeds["x"].shape == (1_000_000,) and feeds["x"].strides == (0,) and feeds["x"].dtype == np.float32
    with pytest.raises(ResourceLimitError, match="Expand"):
        check_feeds_fit(sess, feeds)
    check_feeds_fit(sess, placeholder_feeds(sess, {"n": 3}))          # fits
    assert sess.stats.cache_misses == 0 and sess.last_plan is None   # (the check keeps no plan: the run is cold)
    (out,) = sess.run(None, {"x": np.arange(3, dtype=np.float32)})     # the session is still usable
    assert out.shape == (1000, 3) and out[999].tolist() == [0.0, 1.0, 2.0]
    assert sess.stats.cache_misses == 1 and sess.stats.cache_hits == 0
