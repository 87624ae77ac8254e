"""Machine code without LLVM in the process: an LLVM IR module compiled once per machine by a
child process (:mod:`.build`, llvmlite), kept in the user cache, and mapped executable here.

Why: numba (or llvmlite's LLVM alone) costs a process 60-85 MB resident and ~0.85 s before
its first compiled call, even from numba's cache; a transformer on an AVX2-only CPU needed
it for one function (the column-panel GEMM). The code here needs neither LLVM nor a linker
at run time, only the bytes of the object's ``.text``:

* the module is compiled for a fixed target (:data:`TARGET`: x86-64 with AVX2 and FMA, not
  the host's exact CPU), so one cache entry serves every machine that has those features and
  the key (:func:`cache_key`) is known without LLVM;
* the code must be position-independent and self-contained: an object whose ``.text`` has
  relocations (a constant pool, a library call, a jump table) is refused at build time;
* the bytes go into an anonymous mapping that is made read + execute (never writable and
  executable at once), and each exported function is called through ``ctypes``, which
  releases the GIL for the call (threads split the work: :mod:`.panels`).

The cache entry is machine code: it is written atomically into the user cache directory
(``dynashape.usercache``; numba keeps its compiled code in ``__pycache__`` the same way), named
by a hash of the IR's source, llvmlite's version and the target; an entry that does not parse
is rebuilt. With the cache off (``DYNASHAPE_CACHE_DIR=off``) every process builds again.
"""
from __future__ import annotations

import ctypes
import json
import mmap
import os
import re
import struct
import sys
import tempfile
from pathlib import Path
from typing import Optional

__all__ = ["TARGET", "supported", "cache_key", "compile_object", "text_and_symbols", "write_entry",
           "read_entry", "load", "built_functions"]

#: (triple, cpu, features) the code is compiled for
TARGET = ("x86_64-unknown-linux-gnu", "x86-64", "+avx,+avx2,+fma")
_MAGIC = b"DYNASHAPE-MACHINE-CODE 1\n"


def supported() -> bool:
    """Whether this process can run :data:`TARGET`'s code: Linux on x86-64 (ELF objects, mmap
    and mprotect), AVX2 and FMA (numpy's CPU dispatch says whether the CPU and the OS have
    them), and llvmlite installed to build it (numba's dependency; not imported here)."""
    import importlib.util
    import platform
    if sys.platform != "linux" or platform.machine() not in ("x86_64", "AMD64"):
        return False
    if importlib.util.find_spec("llvmlite") is None:
        return False
    try:
        from numpy._core._multiarray_umath import __cpu_features__ as features
    except ImportError:                                  # numpy < 2
        from numpy.core._multiarray_umath import __cpu_features__ as features
    return bool(features.get("AVX2") and features.get("FMA3"))


def cache_key(ir_module: str, depends=()) -> str:
    """The cache entry's name for the IR that the module named ``ir_module`` builds: a 64-bit
    checksum (CRC-32 and Adler-32) of the bytes of its source file, of the files ``depends``
    (what it reads constants from) and of :mod:`.ir_util` (what every IR module builds
    with), llvmlite's version and :data:`TARGET`. Nothing is imported: the key tells our own
    sources' versions apart, a job a checksum does without hashlib (whose OpenSSL start costs
    a process ~5 ms, in the thread that loads the code while the first run waits for the GIL)."""
    import importlib.util

    from dynashape.distributions import version
    from dynashape.usercache import checksum
    llvmlite_version = version("llvmlite")
    if llvmlite_version is None:        # (a damaged install: importlib.metadata's scan, ~20 ms of imports)
        from importlib.metadata import version as metadata_version
        llvmlite_version = metadata_version("llvmlite")
    data = b"".join(Path(source).read_bytes() for source in (
        importlib.util.find_spec(ir_module).origin, *depends, Path(__file__).with_name("ir_util.py")))
    data += f"{llvmlite_version}|{'|'.join(TARGET)}".encode()
    return f"{ir_module.rsplit('.', 1)[-1]}-{checksum(data)}"


def compile_object(ir_text: str) -> bytes:
    """The ELF object of an IR module for :data:`TARGET`, optimised at -O3, every function
    without builtins (LLVM makes no library calls of its own); needs llvmlite's LLVM: the
    child process of :mod:`.build` calls this."""
    import llvmlite.binding as ll
    legacy = not hasattr(ll, "create_pass_builder")     # llvmlite < 0.44: the legacy pass manager
    if legacy:
        ll.initialize()
    ll.initialize_native_target()
    ll.initialize_native_asmprinter()
    triple, cpu, features = TARGET
    machine = ll.Target.from_triple(triple).create_target_machine(cpu=cpu, features=features, opt=3, reloc="pic",
                                                                   codemodel="small")
    # no-builtins: LLVM may not turn a loop into a call of memset / memcpy (a relocation)
    mod = ll.parse_assembly(re.sub(r"^(define [^{]*)\{", r'\1"no-builtins" {', ir_text, flags=re.M))
    mod.triple, mod.data_layout = triple, str(machine.target_data)
    mod.verify()
    if legacy:
        passes, manager = ll.PassManagerBuilder(), ll.ModulePassManager()
        passes.opt_level = 3
        passes.populate(manager)
        manager.run(mod)
    else:
        builder = ll.create_pass_builder(machine, ll.create_pipeline_tuning_options(speed_level=3))
        builder.getModulePassManager().run(mod, builder)
    return machine.emit_object(mod)


def text_and_symbols(obj: bytes, names) -> tuple:
    """``(code, {name: offset})``: the ``.text`` bytes of an ELF64 little-endian relocatable
    object and the offsets of the functions ``names`` in it. Raises ``ValueError`` when the
    object is not one, a function is missing, or ``.text`` has relocations (the code would
    not run where it is mapped)."""
    if obj[:4] != b"\x7fELF" or obj[4] != 2 or obj[5] != 1:
        raise ValueError("not an ELF64 little-endian object")
    shoff, = struct.unpack_from("<Q", obj, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", obj, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", obj, shoff + i * shentsize) for i in range(shnum)]
    names_at = sections[shstrndx][4]

    def name(offset: int, table: int) -> str:
        end = obj.index(b"\0", table + offset)
        return obj[table + offset:end].decode()

    by_name = {name(s[0], names_at): (i, s) for i, s in enumerate(sections)}
    if ".text" not in by_name:
        raise ValueError("the object has no .text")
    text_index, text = by_name[".text"]
    for sh_name, sh_type, _flags, _addr, _offset, _size, _link, sh_info, _align, _entsize in sections:
        if sh_type in (4, 9) and sh_info == text_index:          # SHT_RELA, SHT_REL applied to .text
            raise ValueError(f"the object's .text has relocations ({name(sh_name, names_at)}): not self-contained")
    symtab = next(s for _i, s in by_name.values() if s[1] == 2)          # SHT_SYMTAB
    strtab = sections[symtab[6]][4]
    offsets = {}
    for at in range(symtab[4], symtab[4] + symtab[5], 24):
        st_name, _info, _other, shndx, value, _size = struct.unpack_from("<IBBHQQ", obj, at)
        if shndx == text_index and st_name:
            offsets[name(st_name, strtab)] = value
    missing = [n for n in names if n not in offsets]
    if missing:
        raise ValueError(f"the object lacks the functions {missing}")
    return obj[text[4]:text[4] + text[5]], {n: offsets[n] for n in names}


def write_entry(path: Path, code: bytes, offsets: dict) -> None:
    """Write a cache entry atomically (a reader sees the old file or the new one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "wb") as f:
        f.write(_MAGIC + json.dumps({"offsets": offsets, "size": len(code)}).encode() + b"\n" + code)
    os.replace(tmp, path)


def read_entry(path: Path) -> Optional[tuple]:
    """``(code, offsets)`` of a cache entry, or None when it is absent or damaged."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if not data.startswith(_MAGIC):
        return None
    header, _, code = data[len(_MAGIC):].partition(b"\n")
    try:
        meta = json.loads(header)
        offsets = {str(k): int(v) for k, v in meta["offsets"].items()}
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    if meta.get("size") != len(code) or any(not 0 <= v < len(code) for v in offsets.values()):
        return None
    return code, offsets


_MAPPINGS: list = []     # the executable mappings: alive as long as the process


def load(code: bytes, offsets: dict) -> dict:
    """``{name: address}`` of the functions in ``code``, copied into a fresh mapping that is
    then made read + execute (``mprotect``). Raises ``OSError`` where the system forbids
    executable mappings."""
    size = max(mmap.PAGESIZE, -(-len(code) // mmap.PAGESIZE) * mmap.PAGESIZE)
    region = mmap.mmap(-1, size, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    region.write(code)
    base = ctypes.addressof(ctypes.c_char.from_buffer(region))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    if libc.mprotect(base, size, mmap.PROT_READ | mmap.PROT_EXEC) != 0:
        raise OSError(ctypes.get_errno(), "mprotect(PROT_READ | PROT_EXEC) was refused")
    _MAPPINGS.append(region)
    return {name: base + offset for name, offset in offsets.items()}


def built_functions(ir_module: str, names, depends=(), timeout: float = 300.0) -> dict:
    """``{name: address}`` of the functions ``names`` that ``module()`` of the module named
    ``ir_module`` (one of this package) builds: from the cache entry (:func:`cache_key`), else built by a child
    process (``python -m dynashape.ops_builtin.fast.native.build``) and cached. Raises
    ``RuntimeError`` when the build fails (its stderr in the message), ``OSError`` when the
    code cannot be mapped executable."""
    from dynashape.usercache import cache_dir
    key = cache_key(ir_module, depends)
    directory = cache_dir()
    folder = _writable(directory / "native") if directory is not None else None
    entry = read_entry(folder / f"{key}.bin") if folder is not None else None
    if entry is None:
        with tempfile.TemporaryDirectory(prefix="dynashape-native-") as scratch:
            path = (folder or Path(scratch)) / f"{key}.bin"
            entry = _build(ir_module, path, timeout)
    code, offsets = entry
    return load(code, {n: offsets[n] for n in names})


def _build(ir_module: str, path: Path, timeout: float) -> tuple:
    """Build the module's cache entry at ``path`` in a child process, and read it."""
    import subprocess
    done = subprocess.run([sys.executable, "-m", f"{__package__}.build", ir_module.rsplit(".", 1)[-1], str(path)],
                          capture_output=True, text=True, timeout=timeout)
    entry = read_entry(path)
    if done.returncode != 0 or entry is None:
        raise RuntimeError(f"building {ir_module} failed: {done.stderr.strip()[-2000:]}")
    return entry


def _writable(directory: Path) -> Optional[Path]:
    """``directory``, created where absent, or None when it cannot be written (the build then
    goes to a temporary directory and is not kept)."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return directory if os.access(directory, os.W_OK) else None
