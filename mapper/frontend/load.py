"""Reading a program: a DSL file or an imported model, parsed and lowered to a task graph.

The entry points every command uses (:func:`load_graph`, :func:`read_program`);
:func:`mapper.frontend.lowering.program.lower` does the lowering itself.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import warnings
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import Any

from mapper.core.graph import SourceNode, TaskGraph
from mapper.errors import InputError, InputWarning, OptionsError
from mapper.frontend.direct import direct_graph
from mapper.frontend.lowering.program import lower, read_dsl_file
from mapper.frontend.parse import parse
from mapper.frontend.sources import ModelFile, is_model

__all__ = ["graph_from_text", "load_graph", "read_program", "read_source", "read_with_sources", "without_spans"]


def graph_from_text(text: str, file: str = "<string>", params: Mapping[str, int | float] | None = None) -> TaskGraph:
    """Parse and lower DSL ``text``; ``file`` names it in errors and anchors includes; ``params``
    replace the values of top-level params (:func:`lower`). A plain explicit-cost program goes
    straight to its graph (:func:`~mapper.frontend.direct.direct_graph`)."""
    graph = None if params else direct_graph(text, file)
    return graph if graph is not None else lower(parse(text, file), params)


def load_graph(path: str | os.PathLike[str]) -> TaskGraph:
    """Read, parse and lower the program at ``path``: a DSL file, or a model file
    (a path, or a :class:`~mapper.frontend.sources.ModelFile` with the sizes of its open dimensions).

    Raises
    ------
    InputError
        When the file cannot be read (naming the file), or an error in an
        imported model (naming its node).
    DslError
        On any error in the program.
    """
    file = os.fspath(path)
    text, blame, sources = read_with_sources(path)
    with blame:
        graph = graph_from_text(text, file, dict(path.params) if isinstance(path, ModelFile) else None)
    return without_spans(graph, sources) if is_model(file) else graph


def without_spans(graph: TaskGraph, sources: Mapping[str, tuple[SourceNode, ...]] | None = None) -> TaskGraph:
    """``graph`` with no source positions: an imported model's tasks have none the user could
    read (the DSL was generated), so later errors name the task, which is named after its node;
    each task gets its model nodes from ``sources`` (task name -> nodes) when given."""
    src = sources or {}
    return dataclasses.replace(graph, tasks=tuple(
        dataclasses.replace(t, span=None, source=src.get(t.name, t.source)) for t in graph.tasks))


def read_source(path: str | os.PathLike[str]) -> str:
    """The DSL text of the program at ``path``: a ``.tg`` file as it is, an ``.onnx``
    model as :mod:`mapper.frontend.importers.onnx_dsl` writes it; InputError naming the file
    if unreadable."""
    return read_program(path)[0]


def read_program(path: str | os.PathLike[str]) -> tuple[str, AbstractContextManager[None]]:
    """:func:`read_source`, and a context for parsing and lowering that text: for an
    imported model, errors in it become errors naming the model's node
    (:meth:`mapper.frontend.importers.onnx_dsl.Imported.blame`)."""
    text, blame, _ = read_with_sources(path)
    return text, blame


def read_with_sources(path: str | os.PathLike[str]) -> tuple[str, AbstractContextManager[None],
                                                  Mapping[str, tuple[SourceNode, ...]]]:
    """:func:`read_program`, and for a model the ONNX nodes each task comes from."""
    file = os.fspath(path)
    if is_model(file):
        from mapper.frontend.importers.onnx_dsl import import_onnx

        model = path if isinstance(path, ModelFile) else ModelFile(file)
        imported = import_onnx(file, dict(model.dims), dict(model.input_shapes), dict(model.input_values))
        warning = imported.warning()
        if warning:
            warnings.warn(warning, InputWarning, stacklevel=2)
        return imported.text, imported.blame(), imported.sources
    return read_dsl_file(file, None, None), contextlib.nullcontext(), {}


#: The sequence length an exported decoder is first imported at to read its attention mask
#: (causal, sliding window): the longest whose ``[S, S]`` mask the importer folds (2^22 values).
PROBE_SEQ = 2048
#: The cache length a KV-cache decode export is first imported at, one new token a sequence:
#: its ``[1, P + 1]`` mask shows any sliding window up to ``P`` positions.
PROBE_PAST = 2**20


def model_lowerer(model: ModelFile, command: str) -> Callable[[int, int, int], TaskGraph]:
    """``(seq, batch, cache) -> graph`` of an exported decoder: imported with its token ids
    ``[batch, seq]`` (its only input, or with its KV cache's past keys and values ``[batch, kv,
    past, dh]``, past = ``cache``), each decoder attention reading ``cache`` positions of a KV
    cache (docs/importers.md, "Decoder layers"), as a DSL model with params SEQ, BATCH and CACHE
    is lowered; its mask (causal, sliding window) read once at :data:`PROBE_SEQ` tokens (at
    :data:`PROBE_PAST` cached ones for a KV-cache export; a window longer than the probe from the
    constant the mask is built with, :mod:`mapper.frontend.importers.onnx_window`) and kept at
    every size; ``command`` is named in the errors."""
    from mapper.frontend.importers.onnx_dsl import import_onnx
    from mapper.frontend.importers.onnx_model import graph_inputs, mask_constants
    from mapper.frontend.importers.onnx_window import PROBE_SEQ as WINDOW_PROBE_SEQ
    from mapper.frontend.importers.onnx_window import constant_window

    if model.dims or model.input_shapes:
        flag = "--dim" if model.dims else "--input-shape"
        raise OptionsError(f"{command} sets the token ids' shape [batch, seq] itself: drop {flag}", obj=flag)
    inputs = graph_inputs(model.path)
    ids = [name for name, dtype, dims in inputs if dtype in ("i32", "i64") and len(dims) == 2]
    pasts = {name: (dims[1], dims[3]) for name, dtype, dims in inputs if name not in ids and len(dims) == 4
             and isinstance(dims[1], int) and isinstance(dims[3], int) and dims[1] > 0 and dims[3] > 0
             and not isinstance(dims[2], int) and dtype.startswith(("f", "bf"))}
    if inputs and (len(ids) != 1 or len(inputs) != 1 + len(pasts)):
        listed = ", ".join(name for name, _, _ in inputs)
        raise OptionsError(f"{command} imports {model.path} at each step's sizes: it needs an export whose inputs "
                           "are the token ids [batch, seq], alone or with a KV cache's past keys and values "
                           f"[batch, kv_heads, past, head_dim] (the model has: {listed})", obj="MODEL")
    made: dict[tuple[int, int, int], TaskGraph] = {}
    mask = (0, 0)

    def imported_at(seq: int, batch: int, cache: int, constants: dict[str, float] | None = None) -> Any:
        shapes: dict[str, tuple[int, ...]] = {ids[0]: (batch, seq)} if ids else {}
        past = max(cache, 1)  # an empty past is no tensor ONNX holds: one position, taken off the cache
        shapes.update({name: (batch, kv, past, dh) for name, (kv, dh) in pasts.items()})
        own = past if pasts else 0
        imported = import_onnx(model.path, None, shapes, dict(model.input_values), cache - own, mask, constants)
        if not imported.fused.get("rotary_attention"):
            raise OptionsError(f"{command} needs a decoder whose attention it recognises (rotary, grouped-query: "
                               f"docs/importers.md); {model.path} has none", obj="MODEL")
        return imported

    def at(seq: int, batch: int, cache: int) -> TaskGraph:
        nonlocal mask
        key = (seq, batch, cache)
        if key not in made:
            if not made:
                try:
                    probe = imported_at(1, 1, PROBE_PAST) if pasts else imported_at(PROBE_SEQ, 1, 0)
                except InputError:  # a model that takes no such length: each size's mask is read alone
                    probe = None
                if probe is not None:
                    windows = {w for _, w in probe.masks}
                    mask = (max(c for c, _ in probe.masks), windows.pop() if len(windows) == 1 else 0)
                    if mask == (1, 0) and not pasts:  # a window past the probe: read from its constant
                        mask = (1, constant_window(mask_constants(model.path), lambda values: imported_at(
                            WINDOW_PROBE_SEQ, 1, 0, values).masks))
            imported = imported_at(seq, batch, cache)
            if not made and imported.warning():
                warnings.warn(imported.warning() or "", InputWarning, stacklevel=2)
            with imported.blame():
                graph = graph_from_text(imported.text, model.path)
            made[key] = without_spans(graph, imported.sources)
        return made[key]

    return at
