"""The package's shape: no import circle inside icicle, and the pipeline never imports the research tools (icicle.lab).

Every relative import counts, also those inside functions, since a lazy import closes a circle as surely."""
import ast
import pathlib

import icicle

ROOT = pathlib.Path(icicle.__file__).parent


def module_name(path: pathlib.Path, root: pathlib.Path) -> str:
    parts = ["icicle", *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: pathlib.Path = ROOT) -> dict[str, set[str]]:
    """Module -> the icicle modules it imports (from .x import, from . import x, from ..x import, import icicle.x)."""
    files = {module_name(p, root): p for p in root.rglob("*.py")}
    graph = {}
    for mod, path in files.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        deps = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                target = f"{base}.{node.module}" if node.module else base
                deps.add(target)
                deps.update(f"{target}.{a.name}" for a in node.names)  # from . import x: x may be a module
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("icicle"):
                deps.add(node.module)
                deps.update(f"{node.module}.{a.name}" for a in node.names)
            elif isinstance(node, ast.Import):
                deps.update(a.name for a in node.names if a.name.startswith("icicle"))
        graph[mod] = {d for d in deps if d in files and d != mod}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import circle as [a, b, ..., a], or [] when the graph has none (depth-first search)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(m: str) -> list[str]:
        state[m] = 1
        path.append(m)
        for d in sorted(graph.get(m, ())):
            if state.get(d) == 1:
                return path[path.index(d):] + [d]
            if d not in state and (c := visit(d)):
                return c
        state[m] = 2
        path.pop()
        return []

    for m in sorted(graph):
        if m not in state and (c := visit(m)):
            return c
    return []


def test_find_cycle_reports_a_circle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == []


def test_import_graph_sees_imports_inside_functions(tmp_path):
    pkg = tmp_path / "icicle"
    (pkg / "lab").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from .b import g\n")
    (pkg / "b.py").write_text("from . import a\n")
    (pkg / "lab" / "__init__.py").write_text("")
    (pkg / "lab" / "x.py").write_text("from ..a import f\n")
    g = import_graph(pkg)
    assert g["icicle.a"] == {"icicle.b"} and g["icicle.b"] == {"icicle", "icicle.a"}
    assert g["icicle.lab.x"] == {"icicle.a"}
    assert find_cycle(g) == ["icicle.a", "icicle.b", "icicle.a"]


def test_no_import_circle():
    cycle = find_cycle(import_graph())
    assert not cycle, "import circle: " + " -> ".join(cycle)


def test_pipeline_never_imports_the_lab():
    bad = {m: sorted(d for d in deps if d == "icicle.lab" or d.startswith("icicle.lab."))
           for m, deps in import_graph().items() if not m.startswith("icicle.lab")}
    assert not {m: d for m, d in bad.items() if d}, bad
