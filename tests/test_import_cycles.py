"""harl's modules import each other without cycles (function-level imports included)."""

from __future__ import annotations

import ast
import graphlib
import subprocess
import sys
from pathlib import Path

HARL = Path(__file__).resolve().parents[1] / "harl"


def module_name(path: Path) -> str:
    parts = path.relative_to(HARL.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(node: ast.AST, package: str) -> list[str]:
    """The modules an import statement names (`from a import b` names a and a.b)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            parts = package.split(".")[: len(package.split(".")) - node.level + 1]
            base = ".".join(parts + ([base] if base else []))
        return [base] + [f"{base}.{alias.name}" for alias in node.names]
    return []


def import_graph() -> dict[str, set[str]]:
    """Module -> the harl modules it imports anywhere in its text."""
    modules = {module_name(path): path for path in HARL.rglob("*.py")}
    graph = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            graph[name] |= {target for target in imported(node, package)
                            if target in modules and target != name}
    return graph


def test_the_graph_sees_harls_imports():
    graph = import_graph()
    assert "harl.cli" in graph["harl.tune"]
    assert "harl.search.harl" in graph["harl.search"]  # inside make_plan
    assert "harl.frontend.activations" in graph["harl.frontend.lowering"]


def test_no_import_cycles():
    try:
        graphlib.TopologicalSorter(import_graph()).prepare()
    except graphlib.CycleError as err:
        raise AssertionError(f"import cycle: {' -> '.join(err.args[1])}") from None


def test_the_command_line_loads_egglog_only_for_an_egraph_search():
    """`--graph off` (the default) runs where egglog is not installed, and starts faster."""
    code = "import sys, harl.tune; print('egglog' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=HARL.parent)
    assert out.stdout.strip() == "False"
