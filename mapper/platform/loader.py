"""Platforms: devices, links and routes between them.

``load_platform`` reads a platform file (TOML, via the standard library's
``tomllib``) by shipped name or by path and checks it against the schema in
``docs/platforms.md``; every problem is one :class:`PlatformError` whose
``obj`` is ``"FILE: key.path"``. Routes follow docs/architecture.md: a direct
link when declared, else store-and-forward through the host's memory.

A cluster or fleet file's ``node`` names a shipped platform or a file in the
platform file's own folder (docs/platforms.md, Clusters): a path that is
absolute, climbs out with ``..`` or leads out through a symbolic link is
refused before anything is opened, so that no other file on the machine is
read, or echoed in an error (as ONNX external data,
:mod:`mapper.frontend.importers.external_data`). The node itself may not name
a node, and its GPUs must be joined (a link, a switch or the host's memory
between every two), as the cluster planner's collectives need.
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


def parse_platform(text: str, file: str = "<string>", folder: str | None = None) -> Platform:
    """Parse and check platform TOML ``text``; ``file`` names it in errors, and a ``node``
    that is not a shipped platform is a file in ``folder`` (None: only shipped nodes)."""
    return _parse(text, file, folder, node=False)


def _parse(text: str, file: str, folder: str | None, node: bool) -> Platform:
    """:func:`parse_platform`; ``node``: the document is a cluster's node (one machine)."""
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
    nested = next((k for k in ("node", "fleet", "cluster") if k in doc), None)
    if node and nested is not None:  # refused before it is followed: no chain, no loop
        what = "[cluster] table" if nested == "cluster" else f"{nested!r} key"
        raise PlatformError(f"it is itself a cluster (it has a {what}); a node is one machine", obj=file)
    if "node" in doc:
        return _cluster_of(doc, file, folder)
    if "fleet" in doc:
        return _fleet_of(doc, file, folder)
    check = Checker(file, support_list)
    if node:  # bounded before its links are made: one per ordered pair of a switch's ports
        from mapper.platform.cluster import MAX_NODE_DEVICES

        plat = check.platform(doc, file, MAX_NODE_DEVICES, "a cluster's node")
    else:
        plat = check.platform(doc, file)
    if "cluster" in doc:  # the devices of one node, repeated
        from mapper.platform.cluster import read_cluster

        plat = replace(plat, cluster=read_cluster(check, doc["cluster"]))
    return plat


def _node(check: Checker, doc: dict[str, Any], file: str, folder: str | None, path: str) -> Platform:
    """The platform ``doc["node"]`` names (shipped, or a file in ``folder``): one machine whose
    GPUs are joined."""
    raw = check.string(doc["node"], f"{path}node")
    ref = raw if raw in _shipped() else _beside(check, raw, folder, f"{path}node")
    try:
        node = _load(ref, node=True)
    except PlatformError as err:
        raise PlatformError(f"the node platform {_shown(raw)}: {err.message}", obj=f"{file}: {path}node") from None
    apart = unjoined(node)
    if apart is not None:
        raise check.fail(f"{path}node", f"the node platform {_shown(raw)} does not join {apart[0]} and {apart[1]} "
                                        "(no link, switch or host route between them): a cluster's collectives "
                                        "need every two GPUs of a node joined")
    return node


def _beside(check: Checker, raw: str, folder: str | None, path: str) -> str:
    """The path of node file ``raw`` in ``folder``, checked before anything is opened: relative,
    no ``..``, and inside ``folder`` once symbolic links are resolved."""
    shown = _shown(raw)
    if folder is None:
        raise check.fail(path, f"{shown} is not a shipped platform ({', '.join(_shipped())}); a platform "
                               "read from no folder names its node by a shipped name")
    parts = raw.replace("\\", "/").split("/")
    if not raw or "\0" in raw or os.path.isabs(raw) or (len(raw) > 1 and raw[1] == ":") or ".." in parts:
        raise check.fail(path, f"{shown} is not a shipped platform nor a relative path inside the platform "
                               "file's folder: a node names a shipped platform or a file beside the cluster file")
    base = os.path.realpath(folder)
    target = os.path.realpath(os.path.join(base, raw))
    if os.path.commonpath([base, target]) != base:
        raise check.fail(path, f"{shown} leads out of the platform file's folder through a symbolic link: a "
                               "node names a shipped platform or a file beside the cluster file")
    return target


def _shown(raw: str) -> str:
    """``raw`` quoted for a message, cut when long."""
    return repr(raw) if len(raw) <= 80 else f"{raw[:60]!r}... ({len(raw):,} characters)"


def unjoined(platform: Platform) -> tuple[str, str] | None:
    """Two GPUs of ``platform`` (all its devices when it has none) with no route between them
    (no link, switch or host relay), or None when every two are joined."""
    names = [d.name for d in platform.devices if d.kind == "gpu"] or [d.name for d in platform.devices]
    if any(set(names) <= set(sw.ports) for sw in platform.switches):
        return None
    out: dict[str, set[str]] = {}
    for link in platform.links:
        out.setdefault(link.src, set()).add(link.dst)
    relay = out.get(platform.host, set()) if platform.host is not None else set()
    for a in names:
        reach = out.get(a, set())
        if platform.host is not None and platform.host in reach:
            reach = reach | relay
        for b in names:
            if b != a and b not in reach and not platform.shares_memory(platform.device_index(a),
                                                                        platform.device_index(b)):
                return a, b
    return None


def _cluster_of(doc: dict[str, Any], file: str, folder: str | None) -> Platform:
    """A cluster file whose ``node`` names a platform (shipped, or a file in ``folder``) for
    one node: that node's devices and switches, with this file's name and ``[cluster]``."""
    check = Checker(file)
    check.keys(doc, "", ("name", "description", "node", "cluster"), ("name", "node", "cluster"))
    name = check.string(doc["name"], "name")
    node = _node(check, doc, file, folder, "")
    from mapper.platform.cluster import read_cluster

    description = check.string(doc.get("description", node.description), "description")
    return replace(node, name=name, description=description, source=file, cluster=read_cluster(check, doc["cluster"]))


def _fleet_of(doc: dict[str, Any], file: str, folder: str | None) -> Platform:
    """A fleet file: ``[[fleet]]`` tables of a ``kind`` name, a ``node`` platform and its
    ``[fleet.cluster]``, and ``[between]`` the kinds (docs/platforms.md, Fleets)."""
    from mapper.platform.cluster import check_kinds, read_between, read_cluster

    check = Checker(file)
    check.keys(doc, "", ("name", "description", "fleet", "between"), ("name", "fleet", "between"))
    name = check.string(doc["name"], "name")
    raws = doc["fleet"]
    if not isinstance(raws, list) or len(raws) < 2:
        raise check.fail("fleet", "expected two or more [[fleet]] tables (one node kind is a [cluster] file)")
    check_kinds(check, len(raws))
    kinds: list[FleetKind] = []
    for i, raw in enumerate(raws):
        path = f"fleet[{i}]."
        tab = check.table(raw, f"fleet[{i}]")
        check.keys(tab, f"fleet[{i}]", ("kind", "node", "cluster"), ("kind", "node", "cluster"))
        kind = check.name(tab["kind"], f"{path}kind")
        if any(k.kind == kind for k in kinds):
            raise check.fail(f"{path}kind", f"kind {kind!r} is given twice")
        node = _node(check, tab, file, folder, path)
        kinds.append(FleetKind(kind, replace(node, cluster=read_cluster(check, tab["cluster"], f"{path}cluster"))))
    check_kinds(check, len(kinds), [k.kind for k in kinds])
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
    return _load(name_or_path, node=False)


def _load(name_or_path: str | Path, node: bool) -> Platform:
    """:func:`load_platform`; ``node``: it is a cluster's node (one machine)."""
    text_name = str(name_or_path)
    shipped = _shipped()
    if text_name in shipped:
        res = shipped[text_name]
        if isinstance(res, os.PathLike):  # a file of the installed package: no output goes over it either
            note_read(res)
        return _parse(res.read_text(encoding="utf-8"), res.name, None, node)
    path = Path(text_name)
    if os.path.lexists(text_name):
        try:
            text = read_text(text_name)
        except Unreadable as exc:
            raise PlatformError(f"cannot read the platform file: {exc.why}", obj=text_name) from None
        return _parse(text, text_name, os.path.dirname(os.path.realpath(text_name)), node)
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
