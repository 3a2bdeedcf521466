"""Reports of a mapping: one module per format (see docs/reports.md).

=========== ============================ ===========================================
format      module                       entry points
=========== ============================ ===========================================
text        :mod:`mapper.report.text`    ``summary_table``, ``schedule_table``
json        :mod:`.json_report`          ``to_json_dict``, ``to_json``, ``write_json``
html        :mod:`.html`                 ``render_html``, ``write_html``
trace       :mod:`.chrome_trace`         ``to_chrome_trace``, ``write_chrome_trace``
dot         :mod:`.dot`                  ``to_dot``, ``write_dot``
png         :mod:`.png`                  ``render_png``, ``write_png`` (needs ``mapper[plot]``)
=========== ============================ ===========================================

Every writer writes atomically (:func:`mapper.report.common.atomic_write`).
:func:`write_report` picks the writer by name or by file suffix.
"""

from __future__ import annotations

import importlib
import os

from mapper.errors import OptionsError

#: format -> (module, writer function)
FORMATS: dict[str, tuple[str, str]] = {
    "text": ("mapper.report.text", "write_text"),
    "json": ("mapper.report.json_report", "write_json"),
    "html": ("mapper.report.html", "write_html"),
    "trace": ("mapper.report.chrome_trace", "write_chrome_trace"),
    "dot": ("mapper.report.dot", "write_dot"),
    "png": ("mapper.report.png", "write_png"),
}

_SUFFIXES = {
    ".txt": "text", ".json": "json", ".html": "html", ".htm": "html", ".dot": "dot", ".gv": "dot", ".png": "png",
}  # fmt: skip


def format_for(path: str | os.PathLike, fmt: str | None = None) -> str:
    """The report format named by ``fmt``, else by ``path``'s suffix (``.json``
    is the JSON contract; a Chrome trace needs ``fmt="trace"``)."""
    if fmt is None:
        suffix = os.path.splitext(os.fspath(path))[1].lower()
        if suffix not in _SUFFIXES:
            raise OptionsError(
                f"cannot tell the report format from {suffix or 'no suffix'!r}; use one of "
                + ", ".join(sorted(_SUFFIXES)),
                obj=os.fspath(path),
            )
        return _SUFFIXES[suffix]
    if fmt not in FORMATS:
        raise OptionsError(f"unknown report format {fmt!r}; available: {', '.join(FORMATS)}", obj="format")
    return fmt


def write_report(result, path: str | os.PathLike, fmt: str | None = None, **options) -> str:
    """Write ``result`` to ``path`` in ``fmt`` (or the suffix's format); returns the format.

    ``options`` go to the writer (``compare=``/``run=`` for html, ``run=`` for trace).
    """
    fmt = format_for(path, fmt)
    module, func = FORMATS[fmt]
    getattr(importlib.import_module(module), func)(result, path, **options)
    return fmt
