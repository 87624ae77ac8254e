"""``python -m dynashape.ops_builtin.fast.native.build NAME PATH``: compile the IR that
``module()`` of ``dynashape.ops_builtin.fast.native.NAME`` builds (e.g. ``panels_ir``; only modules
of this package, never one a caller names elsewhere) for :data:`.machine_code.TARGET` and
write its machine code as a cache entry at PATH.

Run as a child process by :func:`.machine_code.built_functions`, so that the process that
runs the code never maps LLVM. Exit status 0 when the entry is written; otherwise the reason
on stderr and status 1.
"""
from __future__ import annotations

import importlib
import sys
from pathlib import Path

from .machine_code import compile_object, text_and_symbols, write_entry


def main(argv: list) -> int:
    if len(argv) != 2:
        print("usage: python -m dynashape.ops_builtin.fast.native.build NAME PATH", file=sys.stderr)
        return 2
    if not argv[0].isidentifier():
        print(f"not a module of dynashape.ops_builtin.fast.native: {argv[0]!r}", file=sys.stderr)
        return 2
    source = importlib.import_module("dynashape.ops_builtin.fast.native." + argv[0])
    try:
        code, offsets = text_and_symbols(compile_object(str(source.module())), list(source.FUNCTIONS))
        write_entry(Path(argv[1]), code, offsets)
    except (ValueError, RuntimeError, OSError) as exc:
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
