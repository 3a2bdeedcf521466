"""Is a split plan's result the unsplit graph's? (``mapper run --parallel``)

:func:`compare_outputs` runs the unsplit forward graph once, task by task in
topological order with the same kernels and the same seeded inputs and
weights (a shard's value is the slice of its source's,
:func:`mapper.run.synthetic.make_value`), and compares every graph output of the
split run with it, within the output dtype's tolerance
(:func:`mapper.kernels.registry.tolerance`): the split's pieces must really
have combined into the whole.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from mapper.core.graph import TaskGraph
from mapper.run.execute import ExecutionError, TensorStore, run_kernels


@dataclass(frozen=True, slots=True)
class OutputCheck:
    """The largest difference over the outputs, and the worst output's tolerance."""

    outputs: int
    max_error: float
    rtol: float
    atol: float

    def line(self) -> str:
        return (f"split plan: {self.outputs} output{'s' if self.outputs != 1 else ''} equal the unsplit graph's "
                f"(max abs error {self.max_error:.3g}; rtol {self.rtol:g}, atol {self.atol:g})")


def unsplit_outputs(graph: TaskGraph, seed: int, kernels: Any, backend: str = "numba") -> dict[str, Any]:
    """The graph outputs of ``graph`` run whole, in topological order."""
    store = TensorStore(graph, seed, kernels)
    kernel = kernels.run_kernel if backend == "numba" else kernels.reference
    for t in graph.topo_order:
        task = graph.tasks[t]
        store.finish(task, run_kernels(task, store.operands(task), kernels, kernel, None))
    return dict(store.kept())


def compare_outputs(graph: TaskGraph, split: tuple[tuple[str, Any], ...], seed: int,
                    backend: str = "numba") -> OutputCheck:
    """Compare ``split`` (a run's outputs, by task name) with ``graph``'s, run whole.

    Raises :class:`~mapper.run.execute.ExecutionError` naming the first output
    that differs beyond its tolerance.
    """
    from mapper.kernels import registry as kernels

    want = unsplit_outputs(graph, seed, kernels, backend)
    got = {name.rsplit("+", 1)[-1]: value for name, value in split}  # a fused output keeps its name last
    worst, tol = 0.0, (0.0, 0.0)
    for name, ref in want.items():
        if name not in got:
            raise ExecutionError(f"the split run has no output {name!r}", obj=name)
        out, ref = np.asarray(got[name]), np.asarray(ref)
        rtol, atol = kernels.tolerance(graph.tasks[graph.task_index(name)].dtype)
        if out.shape != ref.shape:
            raise ExecutionError(f"output {name} of the split run has shape {out.shape}, the unsplit {ref.shape}",
                                 obj=name)
        diff = np.abs(out.astype(np.float64) - ref.astype(np.float64))
        bad = diff > atol + rtol * np.abs(ref.astype(np.float64))
        if bad.any():
            raise ExecutionError(f"output {name} of the split run differs from the unsplit graph's: max abs error "
                                 f"{float(diff.max()):.3g} (rtol {rtol:g}, atol {atol:g}, {int(bad.sum())} of "
                                 f"{bad.size} elements)", obj=name)
        if diff.size and float(diff.max()) >= worst:
            worst, tol = float(diff.max()), (rtol, atol)
    return OutputCheck(len(want), worst, *tol)
