"""The dynamic-shape cases from public bug reports (../shared/cases), both allocators."""
from __future__ import annotations

import sys

import pytest

from tests.conftest import load_shared_module, shared_path

RUNNERS = ["run", "run_naive"]


def _check_cases_module():
    return load_shared_module("check_cases", "cases", "check_cases.py")


def _case_dirs():
    try:
        root = shared_path("cases")
    except pytest.skip.Exception:
        return []
    return sorted(p for p in root.glob("c[0-9][0-9]*") if (p / "model.onnx").exists())


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("case_dir", _case_dirs(), ids=lambda p: p.name)
def test_case_passes_check_cases(case_dir, runner):
    cc = _check_cases_module()
    tools = shared_path("tools")
    sys.path.insert(0, str(tools))
    try:
        import ds_runner
    finally:
        sys.path.remove(str(tools))
    case = cc.load_case(str(case_dir))
    ok, message = cc.check_case(case, getattr(ds_runner, runner), check_dtype=True, strict_kind=True)
    assert ok, message


def test_shared_cases_all_pass_through_the_cli_checker():
    """The exact command of the acceptance list: check_cases.py with the ds_runner."""
    import subprocess

    cases = shared_path("cases")
    runner = shared_path("tools", "ds_runner.py")
    for name in RUNNERS:
        proc = subprocess.run([sys.executable, "check_cases.py", f"{runner}:{name}"], cwd=cases,
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        assert proc.stdout.strip().splitlines()[-1].endswith(" 0 failed")
