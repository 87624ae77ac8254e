"""dynashape.testing for plugin authors: run_node's errors say what to change, and the
PLUGINS.md example runs as written."""
from __future__ import annotations

import re
from pathlib import Path

import dynashape
import numpy as np
import pytest
from dynashape.testing import run_node

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_run_node_of_an_op_with_two_outputs_asks_for_n_outputs():
    x, k = np.array([3.0, 1.0, 5.0, 2.0], np.float32), np.array([2], np.int64)
    with pytest.raises(dynashape.ExecutionError, match=r"the node has 1 output\(s\): an op with more needs "
                                                       r"n_outputs=, e.g. run_node\('TopK', \.\.\., n_outputs=2\)"):
        run_node("TopK", [x, k])
    values, indices = run_node("TopK", [x, k], n_outputs=2)
    np.testing.assert_array_equal(values, [5, 3])
    np.testing.assert_array_equal(indices, [2, 0])


def test_the_plugins_md_example_runs_as_written():
    """The example's code (an OpLibrary with BiasGelu) defines what it uses and computes Gelu."""
    text = (DOCS / "PLUGINS.md").read_text()
    code = re.search(r"```python\n(import numpy as np\nfrom dynashape.records import OpLibrary, same_dtype\n.*?)```",
                     text, re.S).group(1)
    namespace: dict = {}
    exec(compile(code, "PLUGINS.md", "exec"), namespace)   # noqa: S102 - the repository's own documentation
    x = np.array([-1.0, 0.0, 2.0], np.float32)
    y = np.empty_like(x)
    namespace["_bias_gelu"]([x, np.zeros(3, np.float32)], [y], namespace["_sqrt2"](None))
    from math import erf
    np.testing.assert_allclose(y, [0.5 * v * (1 + erf(v / np.sqrt(2))) for v in x.tolist()], rtol=1e-6, atol=1e-7)
