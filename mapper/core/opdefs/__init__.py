"""The rules behind the op catalogue (:data:`mapper.core.ops.OPS`), by family.

- :mod:`.call`: dtype groups, op classes, the checked call, :class:`~.call.OpInfo` and :class:`~.call.OpSpec`;
- :mod:`.dnn`: matmul, conv2d, pooling, activations and norms, binary ops, attention, embedding;
- :mod:`.movement`: concat, split, reshape, transpose;
- :mod:`.scientific`: stencil, spmv, fft, dot, axpy, reductions, elementwise functions.
"""
