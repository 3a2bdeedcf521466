"""QDQ node units: a quantised ONNX model's ``DequantizeLinear -> op -> QuantizeLinear`` runs as
one quantised op (docs/importers.md, Quantised models).

A QDQ model (the form ONNX Runtime's quantiser writes) keeps every op in float and brackets it
with ``DequantizeLinear`` on its inputs and ``QuantizeLinear`` on its output. The runtimes do not
run those three nodes: they run the op on the quantised tensors ("node units": ONNX Runtime's QDQ
selectors, onnxruntime/core/optimizer/qdq_transformer/selectors_actions; the QNN execution
provider builds one QNN op per unit; TensorRT's explicit quantization fuses Q/DQ into the layer).
:func:`node_units` does the same on the imported graph: an op whose float inputs all come from
``DequantizeLinear`` nodes or constants, and whose every output feeds only ``QuantizeLinear``
nodes, takes the quantised dtype (its constant inputs, the weights, too); those
``DequantizeLinear`` and ``QuantizeLinear`` nodes become aliases of their input. A
``QuantizeLinear`` of a graph input, a ``DequantizeLinear`` before a float op and anything
outside a unit stay tasks of their own.
"""

from __future__ import annotations

import dataclasses

from mapper.frontend.importers.onnx_model import OnnxGraph, OnnxNode

QUANTISED = frozenset({"i8", "u8", "i16", "u16"})
Q, DQ = "QuantizeLinear", "DequantizeLinear"
FLOAT = frozenset({"f32", "f16", "bf16", "f64"})


def node_units(g: OnnxGraph) -> OnnxGraph:
    """``g`` with its QDQ node units run quantised (the module docstring); ``g`` itself when it
    has none."""
    producer = {o: n for n in g.nodes for o in n.outputs}
    consumers: dict[str, list[OnnxNode]] = {}
    for n in g.nodes:
        for i in n.inputs:
            consumers.setdefault(i, []).append(n)
    outputs = set(g.outputs)
    tensors = dict(g.tensors)

    def dq_input(name: str) -> bool:
        p = producer.get(name)
        return p is not None and p.op == DQ and bool(p.inputs) and g.tensors[p.inputs[0]].dtype in QUANTISED

    units: dict[int, str] = {}  # id(op) -> its quantised dtype
    for n in g.nodes:
        if n.op in (Q, DQ) or n.folded or not n.outputs:
            continue
        floats = [i for i in n.inputs if g.tensors[i].dtype in FLOAT]
        if not floats or not any(dq_input(i) for i in floats):
            continue
        if any(not (dq_input(i) or g.tensors[i].const) for i in floats):
            continue
        qs = [c for o in n.outputs for c in consumers.get(o, [])]
        if not qs or any(o in outputs for o in n.outputs) or any(c.op != Q or c.inputs[0] not in n.outputs
                                                                for c in qs):
            continue
        units[id(n)] = g.tensors[qs[0].outputs[0]].dtype
    # a DequantizeLinear read by an op outside the units stays a task (float out), and so the unit op
    # reading it would see a float input: that op is no unit either (to a fixpoint)
    changed = True
    while changed:
        changed = False
        for n in g.nodes:
            if id(n) in units and any(
                    dq_input(i) and any(id(c) not in units for c in consumers[i]) or i in outputs
                    for i in n.inputs if g.tensors[i].dtype in FLOAT and not g.tensors[i].const):
                del units[id(n)]
                changed = True
    if not units:
        return g
    unit_of = {o: units[id(n)] for n in g.nodes if id(n) in units for o in n.outputs}
    nodes = []
    for n in g.nodes:
        if id(n) in units:
            q = units[id(n)]
            for i in n.inputs:
                if g.tensors[i].const and g.tensors[i].dtype in FLOAT:  # a weight, quantised like the op
                    tensors[i] = dataclasses.replace(tensors[i], dtype=q)
            for o in n.outputs:
                tensors[o] = dataclasses.replace(tensors[o], dtype=q)
            nodes.append(n)
        elif n.op == DQ and n.outputs and n.inputs and g.tensors[n.inputs[0]].dtype in QUANTISED \
                and n.outputs[0] not in outputs and consumers.get(n.outputs[0]) \
                and all(id(c) in units for c in consumers[n.outputs[0]]):
            tensors[n.outputs[0]] = dataclasses.replace(tensors[n.outputs[0]], dtype=g.tensors[n.inputs[0]].dtype)
            nodes.append(dataclasses.replace(n, op="Identity", inputs=n.inputs[:1]))
        elif n.op == Q and n.inputs and n.inputs[0] in unit_of:
            nodes.append(dataclasses.replace(n, op="Identity", inputs=n.inputs[:1]))
        else:
            nodes.append(n)
    return dataclasses.replace(g, nodes=tuple(nodes), tensors=tensors)
