"""The import graph of the specjax package: no cycles, and the bench does not import the CLI.

Every module under ``specjax/`` (and ``pallas_kernels/``, ``train/``, which install as
``specjax.pallas_kernels`` and ``specjax.train``) is parsed with :mod:`ast`; every ``import``
and ``from ... import`` of a specjax module is an edge, the ones inside functions included (a
function-level import hides a cycle from import time, not from the design). Imports under
``if TYPE_CHECKING:`` never run and are left out; so are imports by computed name
(``importlib.import_module(f"...")``), which ``ast`` cannot resolve.

How names map to modules:

* ``import specjax.a.b`` is an edge to ``specjax.a.b`` only. Python also runs the parent
  packages' ``__init__`` first, but those edges would make every package that re-exports
  its submodules a cycle with each of them (``specjax`` -> ``specjax.config`` ->
  ``specjax``): such a cycle is harmless, as the parent is already being imported.
* ``from specjax.a import name`` is an edge to the submodule ``specjax.a.name`` when that
  module exists, and to the package ``specjax.a`` (its ``__init__``) otherwise: only then
  does the importer need something the package's ``__init__`` defines.
"""

from __future__ import annotations

import ast
import tomllib
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Known cycles, allowed while they are being removed (issue 20); none at present. Each is
# written as the modules along the cycle from the alphabetically first one, e.g.
# ("specjax.a", "specjax.b") for a -> b -> a. A cycle not listed here fails the test, and so
# does a listed one that no longer exists (delete its entry).
KNOWN_CYCLES: frozenset[tuple[str, ...]] = frozenset()


def package_roots() -> list[tuple[Path, str]]:
    """(directory, package name) of every top-level package pyproject.toml installs."""
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    dirs = cfg.get("package-dir", {})
    return [(ROOT / dirs[p], p) for p in cfg["packages"] if p in dirs]


def discover() -> dict[str, tuple[Path, bool]]:
    """Module name -> (file, whether it is a package ``__init__``)."""
    out = {}
    for top, ns in package_roots():
        for f in sorted(top.rglob("*.py")):
            rel = f.relative_to(top).with_suffix("").parts
            is_pkg = rel[-1] == "__init__"
            parts = rel[:-1] if is_pkg else rel
            out[".".join([ns, *parts])] = (f, is_pkg)
    return out


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    """ids of the nodes under ``if TYPE_CHECKING:`` (or ``typing.TYPE_CHECKING``)."""
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            t = node.test
            name = t.id if isinstance(t, ast.Name) else t.attr if isinstance(
                t, ast.Attribute) else None
            if name == "TYPE_CHECKING":
                for child in node.body:
                    skip.update(id(n) for n in ast.walk(child))
    return skip


def imports_of(name: str, path: Path, is_pkg: bool, modules: dict) -> set[str]:
    """The specjax modules that module ``name`` imports (anywhere in its body)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    skip = _type_checking_nodes(tree)
    out = set()

    def add(target: str):
        if target in modules and target != name:
            out.add(target)

    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the module's package, up level - 1 packages
                pkg = name.split(".") if is_pkg else name.split(".")[:-1]
                base = pkg[:len(pkg) - (node.level - 1)]
                src = ".".join(base + ([node.module] if node.module else []))
            else:
                src = node.module
            for alias in node.names:
                sub = f"{src}.{alias.name}"
                add(sub if sub in modules else src)
        elif (isinstance(node, ast.Call) and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
              and (getattr(node.func, "attr", None) == "import_module"
                   or getattr(node.func, "id", None) in ("import_module", "__import__"))):
            add(node.args[0].value)
    return out


def import_graph() -> dict[str, set[str]]:
    modules = discover()
    return {m: imports_of(m, f, is_pkg, modules) for m, (f, is_pkg) in modules.items()}


def find_cycles(graph: dict[str, set[str]], limit: int = 1000) -> list[tuple[str, ...]]:
    """Every elementary cycle, each as its modules from the alphabetically first one (each
    cycle once). Search from each start node through larger nodes only; ``limit`` bounds the
    count on a pathological graph."""
    order = sorted(graph)
    rank = {m: i for i, m in enumerate(order)}
    cycles = []
    for start in order:
        stack = [(start, iter(sorted(graph[start])))]
        path, on_path = [start], {start}
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                stack.pop()
                on_path.discard(path.pop())
            elif nxt == start:
                cycles.append(tuple(path))
                if len(cycles) >= limit:
                    return cycles
            elif rank[nxt] > rank[start] and nxt not in on_path:
                path.append(nxt)
                on_path.add(nxt)
                stack.append((nxt, iter(sorted(graph[nxt]))))
    return cycles


def _show(cycle: tuple[str, ...]) -> str:
    return " -> ".join(cycle + cycle[:1])


def test_graph_sees_the_imports():
    """The parser finds imports at module and function level, through packages, relative
    ones too (a check of the checker)."""
    g = import_graph()
    assert "specjax.bench.main" in g and "specjax.cli" in g
    assert "specjax.errors" in g["specjax.cli"]  # module level
    assert "specjax.engine" in g["specjax.bench.runner"]  # inside run_bench
    # from specjax.pallas_kernels.tree_attention import kernel: the submodule, not __init__
    api = g["specjax.pallas_kernels.tree_attention.api"]
    assert "specjax.pallas_kernels.tree_attention.kernel" in api
    assert "specjax.pallas_kernels.tree_attention" not in api
    assert find_cycles({"a": {"b"}, "b": {"a", "c"}, "c": {"b"}, "d": {"d"}}) == [
        ("a", "b"), ("b", "c"), ("d",)]


def test_no_import_cycles():
    cycles = find_cycles(import_graph())
    new = [c for c in cycles if c not in KNOWN_CYCLES]
    gone = sorted(KNOWN_CYCLES - set(cycles))
    msg = []
    if new:
        msg.append(f"{len(new)} import cycle(s) among specjax modules:\n"
                   + "\n".join("  " + _show(c) for c in new))
    if gone:
        msg.append("no longer cycles (delete them from KNOWN_CYCLES):\n"
                   + "\n".join("  " + _show(c) for c in gone))
    assert not msg, "\n".join(msg)


def test_bench_does_not_import_the_cli():
    """The CLI builds a BenchConfig and calls the bench; the bench never reaches back."""
    g = import_graph()
    bench = sorted(m for m in g if m == "specjax.bench" or m.startswith("specjax.bench."))
    assert len(bench) > 5  # the package is there and was parsed
    bad = {m: sorted(d for d in g[m] if d == "specjax.cli" or d.startswith("specjax.cli."))
           for m in bench}
    assert not {m: d for m, d in bad.items() if d}


def test_bench_reaches_no_cli_through_other_modules():
    """Not even indirectly: nothing the bench imports, at any depth, imports the CLI."""
    g = import_graph()
    seen, todo = set(), [m for m in g if m == "specjax.bench" or m.startswith("specjax.bench.")]
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        todo.extend(g[m])
    assert "specjax.cli" not in seen


# ----------------------------------------------------------------------------- layering rules


def _reach(g: dict[str, set[str]], starts) -> set[str]:
    """Every module reachable from ``starts`` (the starts included)."""
    seen, todo = set(), list(starts)
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo.extend(g.get(m, ()))
    return seen


def _under(g, prefix: str) -> list[str]:
    return sorted(m for m in g if m == prefix or m.startswith(prefix + "."))


def external_imports(path: Path) -> set[str]:
    """Top-level names of the non-specjax packages a file imports (anywhere in it)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            out.add(node.module.split(".")[0])
    return out - {"specjax"}


def test_policies_import_neither_drafters_nor_the_loop():
    """A policy sees the loop only through the protocol (``decide``/``stop``/``update``)."""
    g = import_graph()
    policies = _under(g, "specjax.policies")
    assert len(policies) >= 4
    reached = _reach(g, policies)
    bad = sorted(m for m in reached if m.startswith("specjax.drafters") or m in (
        "specjax.loop", "specjax.engine", "specjax.methods", "specjax.cli"))
    assert not bad, f"policies reach {bad}"


def test_the_library_never_imports_the_training_package():
    """``specjax.train`` may import the library, never the reverse. The one exception is the
    command line (``specjax.cli``), the top layer that dispatches ``specjax train ...``."""
    g = import_graph()
    lib = [m for m in g if not m.startswith("specjax.train") and m != "specjax.cli"]
    bad = {m: sorted(d for d in g[m] if d.startswith("specjax.train")) for m in lib}
    assert not {m: d for m, d in bad.items() if d}


def test_drafters_import_neither_optax_nor_grain():
    """Drafters (and the heads they run) are inference code: the training stack stays out,
    directly and through every specjax module they reach."""
    g = import_graph()
    modules = discover()
    start = _under(g, "specjax.drafters") + _under(g, "specjax.heads")
    bad = {m: sorted(external_imports(modules[m][0]) & {"optax", "grain"})
           for m in _reach(g, start) if m in modules}
    assert not {m: b for m, b in bad.items() if b}


def test_errors_live_in_one_module():
    """Every exception class is defined in ``specjax/errors.py`` (other modules import it)."""
    modules = discover()
    defined = {}
    for name, (path, _) in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(
                    getattr(b, "id", getattr(b, "attr", "")).endswith(("Error", "Exception"))
                    for b in node.bases):
                defined.setdefault(name, []).append(node.name)
    assert set(defined) == {"specjax.errors"}, defined
    assert "SpecjaxError" in defined["specjax.errors"]
