"""The layout rules of docs/architecture.md: no import cycle inside the
package, no module over 600 lines, each third-party library behind one module."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parent.parent
#: source folder -> the package it is installed as
PACKAGES = {"mapper": "mapper", "kernels": "mapper.kernels"}
MAX_LINES = 600
#: library -> the one module allowed to import it
LIBRARIES = {
    "pulp": "mapper.mapping.exact.solver",
    "ortools": "mapper.mapping.exact.cpsat_model",
    "lark": "mapper.frontend.lark_parse",
    "networkx": "mapper.core.graph",
    "threadpoolctl": "mapper.kernels.blas",
    "matplotlib": "mapper.report.png",
    "numba": "mapper.kernels._jit",
    "tomllib": "mapper.platform.loader",
    "onnx": "mapper.frontend.importers.onnx_model",
    "dask": "mapper.run.dask_engine",
    "distributed": "mapper.run.dask_engine",
    "mtkahypar": "mapper.mapping.hypergraph",
}


def _modules() -> dict[str, Path]:
    out = {}
    for folder, package in PACKAGES.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join([package, *parts])] = path
    return out


def _runtime_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement, at any depth, except those under ``if TYPE_CHECKING:``."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def _imported(name: str, path: Path, node: ast.Import | ast.ImportFrom) -> list[str]:
    """Full names a statement imports (``pkg.mod`` or ``pkg.mod.attr``)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if node.level:
        base = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for _ in range(node.level - 1):
            base = base.rpartition(".")[0]
        module = f"{base}.{node.module}" if node.module else base
    else:
        module = node.module or ""
    return [f"{module}.{a.name}" for a in node.names] + [module]


def _graph() -> tuple[nx.DiGraph, dict[str, set[str]]]:
    modules = _modules()
    graph: nx.DiGraph = nx.DiGraph()
    external: dict[str, set[str]] = {}
    for name, path in modules.items():
        graph.add_node(name)
        for node in _runtime_imports(ast.parse(path.read_text(encoding="utf-8"))):
            for full in _imported(name, path, node):
                target = full
                while target and target not in modules and "." in target:
                    target = target.rpartition(".")[0]
                if target in modules:
                    if target != name:
                        graph.add_edge(name, target)
                else:
                    external.setdefault(full.split(".")[0], set()).add(name)
    return graph, external


def test_no_import_cycle():
    graph, _ = _graph()
    cycles = [c for c in nx.simple_cycles(graph) if len(c) > 1]
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles[:5])


@pytest.mark.parametrize("folder", sorted(PACKAGES))
def test_no_module_over_the_line_limit(folder):
    long = {str(p.relative_to(ROOT)): n for p in sorted((ROOT / folder).rglob("*.py"))
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_each_library_sits_behind_one_module():
    _, external = _graph()
    for library, owner in LIBRARIES.items():
        assert external.get(library, set()) <= {owner}, f"{library} is imported by {sorted(external[library])}"


def test_the_checker_sees_a_cycle_and_a_deferred_import(tmp_path):
    # the rules above would pass vacuously if imports inside functions were missed
    tree = ast.parse("def f():\n    from mapper.costing.cost import CostTable\n\nif TYPE_CHECKING:\n    import pulp\n")
    names = [n for node in _runtime_imports(tree) for n in _imported("mapper.x", tmp_path / "x.py", node)]
    assert "mapper.costing.cost.CostTable" in names and not any(n.startswith("pulp") for n in names)
    graph, _ = _graph()
    assert graph.has_edge("mapper.mapping.milp", "mapper.mapping.lns")


#: stage folders in pipeline order (docs/architecture.md); a folder may import its own and lower ones only
STAGES = ("core", "platform", "frontend", "costing", "engine", "mapping", "run", "parallel", "cluster",
          "serving", "report", "cli")
#: modules of mapper/ itself: errors sits below every stage; the entry modules above every stage but cli
BELOW_ALL = {"mapper.errors"}  # with the core (it escapes through core.terminal)
ENTRIES = {"mapper.pipeline", "mapper.dump"}


def _rank(module: str) -> float | None:
    if module in BELOW_ALL:
        return 0
    if module in ENTRIES:
        return len(STAGES) - 1.5
    if module.startswith("mapper.kernels"):
        return STAGES.index("run") - 0.5  # Numba kernels: used by the runners and the planners' checks
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in STAGES:
        return STAGES.index(parts[1])
    return None  # mapper/__init__ (lazy names) and __main__


def test_mapper_holds_few_modules_of_its_own():
    own = sorted(p.name for p in (ROOT / "mapper").glob("*.py"))
    folders = sorted(p.name for p in (ROOT / "mapper").iterdir() if (p / "__init__.py").exists())
    assert len(own) <= 8, own
    assert set(folders) == set(STAGES), folders


def test_a_lower_stage_never_imports_a_higher_one():
    graph, _ = _graph()
    wrong = []
    for a, b in graph.edges:
        ra, rb = _rank(a), _rank(b)
        if ra is not None and rb is not None and rb > ra:
            wrong.append(f"{a} -> {b}")
    assert not wrong, "imports against the stage order: " + "; ".join(sorted(wrong))
