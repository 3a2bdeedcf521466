"""A decoder's sliding window read from the constant its attention mask is built with.

An export without a KV cache computes its mask from the positions of the sequence it is given,
and mapper reads the mask folded at one size (:func:`.onnx_decoder._mask_kind`). A window ``W``
as long as that sequence or longer cuts no query's view there (transformers' sliding-window
mask keeps key ``k`` for query ``q`` when ``k > q - W``: every ``k <= q`` passes while ``q < W``),
so the folded mask cannot show it. The constant is still in the file, wherever the exporter put
it: a ``Sub`` of the query positions (torch's dynamo and TorchScript exporters of Mistral), or an
``Add`` of ``-W``, a comparison with it, a ``Trilu``'s diagonal. :func:`constant_window` finds it
by what it does: each scalar integer constant that position arithmetic consumes
(:func:`candidates`) is set in turn to two small values and the model imported at a short
sequence; the constant whose mask then shows a window that follows the value one for one
(``w = v + b`` or ``w = -v + b``, whatever sign and offset the exporter wrote it with) is the
window's, and ``W`` is what that line gives at its value in the file. A model without a window
has no such constant (its masks stay causal whatever the values), and one whose window the
folded mask shows never gets here.

The ``onnx`` module is passed in: this module does not import it
(:mod:`mapper.frontend.importers.onnx_model` is its one importer).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

#: Ops position arithmetic feeds a window's constant to.
POSITION_OPS = frozenset({"Sub", "Add", "Greater", "Less", "GreaterOrEqual", "LessOrEqual", "Trilu"})
#: The values a candidate is set to, and the sequence the model is then imported at (long
#: enough for both windows to cut the later queries' views).
TRIES, PROBE_SEQ = (5, 6), 16


def candidates(onnx: Any, graph: Any) -> tuple[tuple[str, float], ...]:
    """(name, value) of each scalar constant of ``graph`` (an initializer held in the file or a
    ``Constant`` node's output) that is a whole number of magnitude 2 or more and is consumed by
    one of :data:`POSITION_OPS`."""
    import numpy as np

    consumers: dict[str, set[str]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, set()).add(node.op_type)
    values: dict[str, float] = {}
    for t in graph.initializer:
        if t.data_location != onnx.TensorProto.EXTERNAL and int(np.prod(t.dims)) == 1:
            values[t.name] = float(onnx.numpy_helper.to_array(t).reshape(()))
    for node in graph.node:
        if node.op_type == "Constant" and node.output:
            for a in node.attribute:
                if a.name == "value" and int(np.prod(a.t.dims)) == 1:
                    values[node.output[0]] = float(onnx.numpy_helper.to_array(a.t).reshape(()))
                elif a.name == "value_int":
                    values[node.output[0]] = float(a.i)
    return tuple((name, v) for name, v in values.items()
                 if v.is_integer() and abs(v) >= 2 and consumers.get(name, set()) & POSITION_OPS)


def set_constants(onnx: Any, graph: Any, given: Mapping[str, float]) -> None:
    """Each scalar constant named in ``given`` (an initializer or a ``Constant`` node's output)
    holds the value given instead, in its own type."""
    import numpy as np

    for t in graph.initializer:
        if t.name in given:
            old = onnx.numpy_helper.to_array(t)
            t.CopyFrom(onnx.numpy_helper.from_array(np.full(old.shape, given[t.name], dtype=old.dtype), t.name))
    for node in graph.node:
        if node.op_type == "Constant" and node.output and node.output[0] in given:
            for a in node.attribute:
                if a.name == "value":
                    old = onnx.numpy_helper.to_array(a.t)
                    a.t.CopyFrom(onnx.numpy_helper.from_array(np.full(old.shape, given[node.output[0]],
                                                                      dtype=old.dtype)))
                elif a.name == "value_int":
                    a.i = int(given[node.output[0]])


def constant_window(found: tuple[tuple[str, float], ...],
                    masks: Callable[[dict[str, float]], tuple[tuple[int, int], ...]]) -> int:
    """The window ``W`` of the model whose :func:`candidates` are ``found`` (module docstring);
    ``masks(values)``: the (causal, window) of each decoder attention with those constants set,
    imported at :data:`PROBE_SEQ` tokens. 0 when no constant is the window's."""
    for name, value in found:
        sign = 1.0 if value > 0 else -1.0
        tries = [sign * v for v in TRIES]
        seen: list[int] = []
        for v in tries:
            windows = {w for causal, w in masks({name: v}) if causal}
            if len(windows) != 1 or 0 in windows:
                break
            seen.append(windows.pop())
        if len(seen) != len(tries):
            continue
        slope = (seen[1] - seen[0]) / (tries[1] - tries[0])
        if abs(slope) != 1.0:
            continue
        window = seen[0] + slope * (value - tries[0])
        if window >= 1:
            return int(window)
    return 0
