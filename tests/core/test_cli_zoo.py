"""``dynashape run MODEL --dim ... --compare-ort`` on every model of ../shared/zoo (zoo.json and
zoo2/zoo2.json) with random feeds only: exit code 0 and every output within tolerance of ONNX
Runtime. The dims are the catalogue's named shape, spelled in the model's own dim names."""
from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from dynashape.cli import main
from tests.conftest import ORT_U8S8_SATURATES, SHARED, shared_path

CATALOGUES = (("zoo", "zoo.json"), ("zoo/zoo2", "zoo2.json"))
#: the catalogue's named shape each model runs with (the first of these it has)
SHAPES = ("odd", "small")
#: largest max abs diff to ONNX Runtime of any output (the models' outputs are O(1)-O(10);
#: the diffs seen are below 4e-6)
TOLERANCE = 1e-4
#: models whose outputs are compared more loosely, and why
LOOSER = {
    # box corners are pixel coordinates up to a few hundred: 1e-3 px is float32 rounding of the decode
    "zoo/zoo2/detection/retinanet_tiny": 1e-3,
    # --compare-ort runs onnxruntime at its default level, which fuses Q/DQ pairs into integer kernels
    # that round differently (tests/models/test_zoo2_quant.py compares exactly with ORT_DISABLE_ALL):
    # a few quantization steps (scale ~0.014) apart
    "zoo/zoo2/quant/resnet_tiny_qdq": 0.1,
}


def _catalogue() -> dict:
    """``{key: (folder, entry)}`` of every catalogued model, {} without ../shared."""
    out = {}
    for folder, name in CATALOGUES:
        path = SHARED / folder / name
        if path.exists():
            out.update({f"{folder}/{k}": (folder, v) for k, v in json.loads(path.read_text()).items()})
    return out


if ORT_U8S8_SATURATES:
    # onnxruntime's uint8 x int8 products saturate on this CPU (tests/conftest.py): its fused
    # integer kernels are ~9 quantization steps off (0.13), bert_tiny_dynamic's MatMulInteger
    # 5e-3; tests/models/test_zoo2_quant.py compares both with exact oracles
    LOOSER.update({"zoo/zoo2/quant/resnet_tiny_qdq": 0.3, "zoo/zoo2/quant/bert_tiny_dynamic": 2e-2})


def dim_args(entry: dict) -> list[str]:
    """``--dim NAME=N`` for the catalogue's shape: each zoo symbol under the model's own dim
    names (the entry's ``dims`` aliases, ``"input:axis"`` included) or as itself."""
    symbols = next(entry["shapes"][s] for s in SHAPES + tuple(entry["shapes"]) if s in entry["shapes"])
    aliases = entry.get("dims", {})
    names = {sym: [own for own, zoo in aliases.items() if zoo == sym] or [sym] for sym in symbols}
    return [arg for sym, value in symbols.items() for own in names[sym] for arg in ("--dim", f"{own}={value}")]


def zoo_command(key: str) -> list[str]:
    """The ``dynashape run`` arguments of a catalogued model: its dims and ``--compare-ort``."""
    folder, entry = _catalogue()[key]
    return ["run", str(SHARED / folder / entry["file"]), *dim_args(entry), "--compare-ort"]


OUTPUT = re.compile(r"^output (\S+): (.+) checksum=(\S+) max_abs_diff_vs_ort=(\S+)$")


@pytest.mark.parametrize("key", sorted(_catalogue()) or ["zoo/(no ../shared)"])
def test_run_random_feeds_match_ort_on_every_zoo_model(key):
    shared_path("zoo", "zoo.json")
    args = zoo_command(key)
    result = CliRunner().invoke(main, args)
    assert isinstance(result.exception, (SystemExit, type(None))), repr(result.exception)  # no traceback
    assert result.exit_code == 0, f"dynashape {' '.join(args)}\n{result.output}"
    outputs = [OUTPUT.match(line) for line in result.output.splitlines() if line.startswith("output ")]
    assert outputs and all(outputs), result.output  # every output compared, none DIFFERS in shape
    diffs = {m[1]: float(m[4]) for m in outputs}
    assert max(diffs.values()) <= LOOSER.get(key, TOLERANCE), diffs
