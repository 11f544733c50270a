"""gpulint's own import graph, read statically (ast, nothing imported), and its cycles.

    python tests/importgraph.py                 # the cycles, one per line
    python tests/importgraph.py --mermaid       # the package graph as a Mermaid diagram
    python tests/importgraph.py --dot           # the same as Graphviz

Modules are the files under `src/gpulint/` and `rules/` (installed as `gpulint.rules`). Three
kinds of edge A -> B, kept apart:

- `edges`: an import of B that runs when A is imported: a statement at module level, also
  inside a module-level `if`, `try`, `with` or class body;
- `deferred_edges`: an import inside a function, which runs when the function is first called
  (kept lazy for start-up time, or to break a cycle: the second is what the test catches);
- `typing_edges`: under `if TYPE_CHECKING:`, never run; mypy's only (a model annotated with the
  type of the file that builds it is one).

The test fails on a cycle of `edges` (an import-order failure waiting to happen) and on a cycle
of `edges` and `deferred_edges` together (a cycle hidden inside a function, not broken). `from package import name` is an edge to `package.name` when that is a
module, else to `package`. An import names its target only: that Python also runs the target's
parent packages' `__init__` is not an edge (it would tie every module to every `__init__`).

`tests/test_architecture.py` fails on any cycle of runtime edges; `docs/architecture.md` shows
the graph this draws.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "gpulint"


def module_files(root: Path = ROOT) -> dict[str, Path]:
    """Module name -> file, for gpulint's own source and its rules."""
    out: dict[str, Path] = {}
    for base, prefix in ((root / "src" / PACKAGE, PACKAGE),):
        for path in sorted(base.rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            parts = list(path.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join([prefix, *parts])] = path
    return out


@dataclass
class Graph:
    modules: dict[str, Path]
    edges: dict[str, set[str]] = field(default_factory=dict)  # run when the module is imported
    typing_edges: dict[str, set[str]] = field(default_factory=dict)  # under TYPE_CHECKING only
    deferred_edges: dict[str, set[str]] = field(default_factory=dict)  # inside a function

    def runtime(self) -> dict[str, set[str]]:
        """`edges` and `deferred_edges` together: every import that can run."""
        return {m: self.edges[m] | self.deferred_edges.get(m, set()) for m in self.edges}

    def cycles(self, edges: dict[str, set[str]] | None = None) -> list[list[str]]:
        """Every strongly connected component of more than one module of `edges` (default: the
        module-level ones), each as its sorted members: one entry per knot, however many loops
        it holds."""
        edges = self.edges if edges is None else edges
        return [sorted(c) for c in _components(edges) if len(c) > 1]

    def cycle_paths(self, edges: dict[str, set[str]] | None = None) -> list[list[str]]:
        """One shortest loop through each knot, A -> B -> ... -> A, for the message."""
        edges = self.edges if edges is None else edges
        return [_shortest_loop(edges, knot[0], set(knot)) for knot in self.cycles(edges)]


def _is_type_checking(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def _module_level_imports(tree: ast.Module) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """(import statement, under TYPE_CHECKING) for each import run at import time."""

    def walk(body: Iterable[ast.stmt], typing: bool) -> Iterator[tuple[ast.stmt, bool]]:
        for node in body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                yield node, typing
            elif isinstance(node, ast.If):
                yield from walk(node.body, typing or _is_type_checking(node.test))
                yield from walk(node.orelse, typing)
            elif isinstance(node, ast.Try | ast.TryStar):
                for block in (node.body, node.orelse, node.finalbody):
                    yield from walk(block, typing)
                for handler in node.handlers:
                    yield from walk(handler.body, typing)
            elif isinstance(node, ast.With):
                yield from walk(node.body, typing)
            elif isinstance(node, ast.ClassDef):
                yield from walk(node.body, typing)  # a class body runs at import time

    for node, typing in walk(tree.body, False):
        assert isinstance(node, ast.Import | ast.ImportFrom)
        yield node, typing


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool, known: set[str]):
    if isinstance(node, ast.Import):
        for alias in node.names:
            name = alias.name
            # `import a.b.c` binds `a` but runs a.b.c: the edge is to the deepest known module
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name:
                yield name
        return
    if node.level:
        base = module.split(".")
        if not is_package:
            base = base[:-1]
        base = base[: len(base) - (node.level - 1)]
        source = ".".join([*base, node.module] if node.module else base)
    else:
        source = node.module or ""
    for alias in node.names:
        full = f"{source}.{alias.name}"
        if full in known:
            yield full
        elif source in known:
            yield source


def build(root: Path = ROOT) -> Graph:
    modules = module_files(root)
    known = set(modules)
    graph = Graph(modules, *({m: set() for m in modules} for _ in range(3)))
    for module, path in modules.items():
        tree = ast.parse(path.read_bytes(), str(path))
        is_package = path.name == "__init__.py"
        top = set()
        for node, typing in _module_level_imports(tree):
            top.add(node)
            for target in _targets(node, module, is_package, known):
                if target != module:
                    (graph.typing_edges if typing else graph.edges)[module].add(target)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom) and node not in top:
                for target in _targets(node, module, is_package, known):
                    if target != module:
                        graph.deferred_edges[module].add(target)
    for module in modules:  # an edge that runs at import time is neither of the others
        graph.typing_edges[module] -= graph.edges[module]
        graph.deferred_edges[module] -= graph.edges[module]
    return graph


def _components(edges: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's strongly connected components, iteratively (no recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[set[str]] = []
    counter = 0
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                out.append(component)
    return out


def _shortest_loop(edges: dict[str, set[str]], start: str, members: set[str]) -> list[str]:
    from collections import deque

    previous: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for child in sorted(edges.get(node, ())):
            if child not in members:
                continue
            if child == start:
                path = [node]
                while path[-1] != start:
                    path.append(previous[path[-1]])
                return [*reversed(path), start]
            if child not in previous:
                previous[child] = node
                queue.append(child)
    return [start, start]


# -- pictures ----------------------------------------------------------------------------------
def short(module: str) -> str:
    return module.removeprefix(f"{PACKAGE}.") if module != PACKAGE else PACKAGE


def group(module: str) -> str:
    """The node a module is drawn as in the package picture: rules/ as one box, each front-end
    package as one, the reporters, server, integrations and runtime as one each."""
    parts = module.split(".")
    if len(parts) >= 2 and parts[1] in ("rules", "reporters", "server", "integrations", "runtime"):
        return ".".join(parts[:2])
    if len(parts) >= 3 and parts[1] == "frontends" and parts[2] in ("cuda", "python"):
        return ".".join(parts[:3])
    return module


def grouped_edges(
    graph: Graph, edges: dict[str, set[str]] | None = None, grouping=group
) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for module, targets in (graph.edges if edges is None else edges).items():
        source = grouping(module)
        out.setdefault(source, set())
        for target in targets:
            if grouping(target) != source:
                out[source].add(grouping(target))
    return out


def _node_id(name: str) -> str:
    return name.replace(".", "_")


def mermaid(graph: Graph, only: Iterable[str] | None = None, grouping=group) -> str:
    """The package graph as Mermaid (`flowchart LR`): module-level imports as arrows, imports
    made only inside functions dotted, modules in a cycle of either in red, and the arrows
    within a cycle thick. `grouping` names the box a module is drawn in (default `group`:
    rules/ as one box, each front-end package as one); `only`, the boxes drawn."""
    runtime = graph.runtime()
    edges = grouped_edges(graph, runtime, grouping)
    top = grouped_edges(graph, None, grouping)
    if only is not None:
        keep = set(only)
        edges = {s: {t for t in ts if t in keep} for s, ts in edges.items() if s in keep}
    knotted = {grouping(m) for c in graph.cycles(runtime) for m in c} & set(edges)
    lines = ["flowchart LR"]
    for name in sorted(edges):
        lines.append(f'    {_node_id(name)}["{short(name)}"]')
    in_knot = {m for c in graph.cycles(runtime) for m in c}
    knot_groups = {(grouping(a), grouping(b)) for a in in_knot for b in runtime[a] if b in in_knot}
    for source in sorted(edges):
        for target in sorted(edges[source]):
            if (source, target) in knot_groups:
                arrow = "==>"
            else:
                arrow = "-->" if target in top.get(source, ()) else "-.->"
            lines.append(f"    {_node_id(source)} {arrow} {_node_id(target)}")
    if knotted:
        lines.append("    classDef knot fill:#fdd,stroke:#c00")
        lines.append("    class " + ",".join(_node_id(n) for n in sorted(knotted)) + " knot")
    return "\n".join(lines) + "\n"


def dot(graph: Graph) -> str:
    """As `mermaid`, in Graphviz (module-level imports solid, in-function ones dashed)."""
    runtime = graph.runtime()
    edges = grouped_edges(graph, runtime)
    top = grouped_edges(graph)
    knotted = {group(m) for c in graph.cycles(runtime) for m in c}
    lines = ["digraph gpulint {", "  rankdir=LR;", "  node [shape=box, fontsize=10];"]
    for name in sorted(edges):
        style = ', style=filled, fillcolor="#ffdddd"' if name in knotted else ""
        lines.append(f'  "{short(name)}" [label="{short(name)}"{style}];')
    for source in sorted(edges):
        for target in sorted(edges[source]):
            style = "" if target in top.get(source, ()) else " [style=dashed]"
            lines.append(f'  "{short(source)}" -> "{short(target)}"{style};')
    lines.append("}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mermaid", action="store_true")
    parser.add_argument("--dot", action="store_true")
    parser.add_argument(
        "--modules", help="with --mermaid: only these modules, one box each (comma-separated)"
    )
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout to read")
    args = parser.parse_args(argv)
    graph = build(args.root)
    if args.mermaid:
        if args.modules:
            names = [
                m if m.startswith(PACKAGE) else f"{PACKAGE}.{m}" for m in args.modules.split(",")
            ]
            sys.stdout.write(mermaid(graph, [n for n in names if n in graph.modules], lambda m: m))
        else:
            sys.stdout.write(mermaid(graph))
        return 0
    if args.dot:
        sys.stdout.write(dot(graph))
        return 0
    found = 0
    both = {m: graph.runtime()[m] | graph.typing_edges[m] for m in graph.edges}
    for title, edges in (
        ("module level", graph.edges),
        ("module level + in functions", graph.runtime()),
        ("module level + in functions + TYPE_CHECKING (not enforced)", both),
    ):
        loops = graph.cycle_paths(edges)
        print(f"{title}: {len(loops)} cycles")
        for knot, loop in zip(graph.cycles(edges), loops, strict=True):
            print(f"  {len(knot)} modules: {' -> '.join(short(m) for m in loop)}")
            print("      " + ", ".join(short(m) for m in knot))
        found += len(loops) if "not enforced" not in title else 0
    counts = [sum(len(t) for t in e.values()) for e in (graph.edges, graph.deferred_edges)]
    typing = sum(len(t) for t in graph.typing_edges.values())
    print(
        f"{len(graph.modules)} modules; import edges: {counts[0]} at module level, "
        f"{counts[1]} in functions only, {typing} under TYPE_CHECKING only"
    )
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
