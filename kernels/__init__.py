"""Numba kernels for every op of docs/ops.md, with NumPy references.

Use :mod:`mapper.kernels.registry` (``run_kernel``, ``reference``, ``KERNELS``,
``tolerance``, ``make_tensor``/``make_csr``/``make_ids``). Importing this
package imports nothing else: Numba loads with the registry, and each kernel
compiles on its first call.
"""
