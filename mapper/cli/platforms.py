"""``mapper platforms``: the shipped platforms, one per line."""

from __future__ import annotations

import json
import sys

from mapper.platform.loader import list_platforms, load_platform


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "platforms", help="list the shipped platforms",
        description="List the shipped platforms: name, devices and description, one per line.",
    )
    p.add_argument("--json", action="store_true", help="print a JSON list of {name, devices, description}")
    p.set_defaults(func=run)


def run(args) -> int:
    rows = []
    for name, description in list_platforms():
        plat = load_platform(name)
        rows.append((name, plat.summary(), description, [d.name for d in plat.devices]))
    if args.json:
        data = [{"name": n, "summary": s, "description": d, "devices": devs} for n, s, d, devs in rows]
        json.dump(data, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    wn = max(len(r[0]) for r in rows)
    ws = max(len(r[1]) for r in rows)
    for name, summary, description, _ in rows:
        print(f"{name:<{wn}}  {summary:<{ws}}  {description}")
    return 0
