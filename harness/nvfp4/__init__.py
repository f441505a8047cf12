"""Verification and measurement of the NVFP4 operator in :mod:`nvfp4_kernels`: oracle, byte
tables, shape matrices and strategies, goldens, the model level, GPU check, benchmarks and
the mutation check. Built on the generic engine; nothing below imports it."""
