"""Kernels as machine code built from LLVM IR once per machine and run without LLVM or
numba in the process (:mod:`.machine_code`); the column-panel GEMM is the first
(:mod:`.panels`)."""
