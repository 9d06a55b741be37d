"""The import graph of ``gateway/``: no cycles, and layers that point one way.

Every ``import`` / ``from ... import`` of a ``gateway`` module counts, at module level or
inside a function (a lazy import is still a dependency); only imports under
``if TYPE_CHECKING:`` are left out, as they never run.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "gateway"
# The core: what the flow drives. None of it may reach up into the flow or the server.
CORE = ("gateway.projection", "gateway.recovery", "gateway.compaction", "gateway.providers",
        "gateway.sessions", "gateway.telemetry", "gateway.routing", "gateway.config",
        "gateway.errors", "gateway.backoff", "gateway.startup")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The gateway modules ``name`` imports (a ``from pkg import sub`` names ``pkg.sub``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):  # drop ``if TYPE_CHECKING:`` bodies
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            node.body = []
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                       for alias in node.names]
        else:
            continue
        found.update(t for t in targets if t in known and t != name)
    return found


def graph() -> dict[str, set[str]]:
    found = modules()
    known = set(found)
    return {name: imports_of(name, path, known) for name, path in found.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_the_walk_sees_the_real_graph() -> None:
    edges = graph()
    assert "gateway.flow.driver" in edges["gateway.server.app"]
    assert "gateway.recovery.ladder" in edges["gateway.flow.driver"]
    assert "gateway.compaction.service" in edges["gateway.flow.driver"]  # (a lazy import)


def test_no_import_cycles_in_gateway() -> None:
    assert cycles(graph()) == []


def test_a_cycle_is_found() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


@pytest.mark.parametrize("core", CORE)
def test_core_never_imports_the_server_or_the_flow(core: str) -> None:
    edges = graph()
    offenders = {
        f"{name} -> {target}"
        for name, targets in edges.items() if name == core or name.startswith(core + ".")
        for target in targets if target.startswith(("gateway.server", "gateway.flow"))
    }
    assert offenders == set()


def test_the_flow_never_imports_the_server() -> None:
    edges = graph()
    assert {f"{n} -> {t}" for n, ts in edges.items() if n.startswith("gateway.flow")
            for t in ts if t.startswith("gateway.server")} == set()


def package_of(module: str) -> str:
    """``gateway.X`` for a module of package X (a top-level module is its own package)."""
    return ".".join(module.split(".")[:2])


def package_graph(edges: dict[str, set[str]]) -> dict[str, set[str]]:
    """The import graph folded onto the packages directly under ``gateway``."""
    folded: dict[str, set[str]] = {}
    for name, targets in edges.items():
        source = package_of(name)
        folded.setdefault(source, set()).update(
            package_of(t) for t in targets if package_of(t) != source)
    return folded


def test_no_package_cycles_in_gateway() -> None:
    # Two packages that import each other, even through different modules, are one room.
    assert cycles(package_graph(graph())) == []


def test_a_package_cycle_is_found() -> None:
    edges = {"gateway.server.app": {"gateway.wires.base"},
             "gateway.wires.handlers": {"gateway.server.http"},
             "gateway.wires.base": set(), "gateway.server.http": set()}
    assert cycles(package_graph(edges)) == [["gateway.server", "gateway.wires"]]


def test_recall_is_its_own_package_above_compaction() -> None:
    edges = package_graph(graph())
    assert "gateway.compaction" in edges["gateway.recall"]
    assert "gateway.recall" not in edges["gateway.compaction"]
