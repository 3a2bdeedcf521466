"""Platforms: devices, links and routes between them.

``load_platform`` reads a platform file (TOML, via the standard library's
``tomllib``) by shipped name or by path and checks it against the schema in
``docs/platforms.md``; every problem is one :class:`PlatformError` whose
``obj`` is ``"FILE: key.path"``. Routes follow docs/architecture.md: a direct
link when declared, else store-and-forward through the host's memory.
"""

from __future__ import annotations

import difflib
import os
import re
import tomllib
from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import Any

from mapper.core.files import Unreadable, note_read, read_text
from mapper.errors import PlatformError, SourceSpan
from mapper.platform.devices import DEVICE_KINDS, Device, Fleet, FleetKind, Link, Platform
from mapper.platform.schema import Checker, model_key_ok

__all__ = ["DEVICE_KINDS", "Device", "Link", "Platform", "PLATFORM_PACKAGE", "list_platforms", "load_platform",
           "model_key_ok", "parse_platform"]

#: Package holding the shipped platform files.
PLATFORM_PACKAGE = "mapper.platforms"


_TOML_POS = re.compile(r"\(at line (\d+), column (\d+)\)")


def parse_platform(text: str, file: str = "<string>") -> Platform:
    """Parse and check platform TOML ``text``; ``file`` names it in errors."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        m = _TOML_POS.search(message)
        span = None
        if m:  # one line: file:line:col (no source excerpt), like every platform error
            span = SourceSpan(file, int(m.group(1)), int(m.group(2)))
            message = message[: m.start()].rstrip()
        raise PlatformError(f"TOML syntax error: {message}", span=span, obj=file) from None
    if "node" in doc:
        return _cluster_of(doc, file)
    if "fleet" in doc:
        return _fleet_of(doc, file)
    check = Checker(file, support_list)
    plat = check.platform(doc, file)
    if "cluster" in doc:  # the devices of one node, repeated
        from mapper.platform.cluster import read_cluster

        plat = replace(plat, cluster=read_cluster(check, doc["cluster"]))
    return plat


def _node(check: Checker, doc: dict[str, Any], file: str, path: str) -> Platform:
    """The platform ``doc["node"]`` names (shipped, or a path beside ``file``): one machine."""
    raw = check.string(doc["node"], f"{path}node")
    ref = raw
    if ref not in _shipped() and not file.startswith("<"):
        ref = os.path.join(os.path.dirname(file), ref)
    try:
        node = load_platform(ref)
    except PlatformError as err:
        raise PlatformError(f"the node platform {raw!r}: {err.message}", obj=f"{file}: {path}node") from None
    if node.cluster is not None or node.fleet is not None:
        raise check.fail(f"{path}node", f"{raw!r} is itself a cluster; a node is one machine")
    return node


def _cluster_of(doc: dict[str, Any], file: str) -> Platform:
    """A cluster file whose ``node`` names a platform (shipped, or a path beside the file) for
    one node: that node's devices and switches, with this file's name and ``[cluster]``."""
    check = Checker(file)
    check.keys(doc, "", ("name", "description", "node", "cluster"), ("name", "node", "cluster"))
    name = check.string(doc["name"], "name")
    node = _node(check, doc, file, "")
    from mapper.platform.cluster import read_cluster

    description = check.string(doc.get("description", node.description), "description")
    return replace(node, name=name, description=description, source=file, cluster=read_cluster(check, doc["cluster"]))


def _fleet_of(doc: dict[str, Any], file: str) -> Platform:
    """A fleet file: ``[[fleet]]`` tables of a ``kind`` name, a ``node`` platform and its
    ``[fleet.cluster]``, and ``[between]`` the kinds (docs/platforms.md, Fleets)."""
    from mapper.platform.cluster import read_between, read_cluster

    check = Checker(file)
    check.keys(doc, "", ("name", "description", "fleet", "between"), ("name", "fleet", "between"))
    name = check.string(doc["name"], "name")
    raws = doc["fleet"]
    if not isinstance(raws, list) or len(raws) < 2:
        raise check.fail("fleet", "expected two or more [[fleet]] tables (one node kind is a [cluster] file)")
    kinds: list[FleetKind] = []
    for i, raw in enumerate(raws):
        path = f"fleet[{i}]."
        tab = check.table(raw, f"fleet[{i}]")
        check.keys(tab, f"fleet[{i}]", ("kind", "node", "cluster"), ("kind", "node", "cluster"))
        kind = check.name(tab["kind"], f"{path}kind")
        if any(k.kind == kind for k in kinds):
            raise check.fail(f"{path}kind", f"kind {kind!r} is given twice")
        node = _node(check, tab, file, path)
        kinds.append(FleetKind(kind, replace(node, cluster=read_cluster(check, tab["cluster"], f"{path}cluster"))))
    bandwidth, latency = read_between(check, doc["between"])
    first = kinds[0].platform
    description = check.string(doc.get("description", ""), "description")
    return replace(first, name=name, description=description, source=file,
                   fleet=Fleet(tuple(kinds), bandwidth, latency))


def support_list(name: str) -> Any:
    """The parsed file of shipped op-support list ``name`` (``platforms/support/NAME.toml``),
    None when there is none; for ``""`` the shipped names."""
    root = resources.files(PLATFORM_PACKAGE) / "support"
    files = {p.name[: -len(".toml")]: p for p in root.iterdir() if p.name.endswith(".toml")}
    if not name:
        return sorted(files)
    if name not in files:
        return None
    try:
        return tomllib.loads(files[name].read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:  # a shipped file is checked by the tests; say which if not
        raise PlatformError(f"TOML syntax error: {exc}", obj=f"support/{name}.toml") from None


def _shipped() -> dict[str, Any]:
    """Shipped platform files by name (the file stem), sorted."""
    root = resources.files(PLATFORM_PACKAGE)
    files = [p for p in root.iterdir() if p.name.endswith(".toml")]
    return {p.name[: -len(".toml")]: p for p in sorted(files, key=lambda p: p.name)}


def load_platform(name_or_path: str | Path) -> Platform:
    """Load a platform by shipped name (``workstation``) or by file path."""
    text_name = str(name_or_path)
    shipped = _shipped()
    if text_name in shipped:
        res = shipped[text_name]
        if isinstance(res, os.PathLike):  # a file of the installed package: no output goes over it either
            note_read(res)
        return parse_platform(res.read_text(encoding="utf-8"), res.name)
    path = Path(text_name)
    if os.path.lexists(text_name):
        try:
            text = read_text(text_name)
        except Unreadable as exc:
            raise PlatformError(f"cannot read the platform file: {exc.why}", obj=text_name) from None
        return parse_platform(text, text_name)
    if path.suffix == ".toml" or len(path.parts) > 1:
        raise PlatformError("no such platform file", obj=text_name)
    close = difflib.get_close_matches(text_name, list(shipped), n=1)
    raise PlatformError(
        f"unknown platform {text_name!r}; shipped: {', '.join(shipped)} (or give a path to a .toml file)",
        obj=text_name, hint=f"did you mean '{close[0]}'?" if close else None,
    )


def list_platforms() -> list[tuple[str, str]]:
    """``(name, description)`` of every shipped platform, sorted by name."""
    return [(name, load_platform(name).description) for name in _shipped()]
