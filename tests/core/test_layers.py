"""The package's layers point one way: the engine-free core imports nothing above it, nothing
below the CLI imports the CLI, adapters do not import the demo, and module-level imports have no
cycles. Read from the source with ``ast``, lazy (function-level) imports included, and so are
modules loaded by name (``import_module("vpo....")``, or a string naming a vpo module that is
handed to it later)."""

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGE = SRC / "vpo"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> tuple[set[str], set[str]]:
    """(module-level imports, all imports) of vpo modules in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top, every = set(), set()
    me = module_name(path)
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative import
                base = me.split(".")[: -node.level + (1 if path.name == "__init__.py" else 0) or None]
                names = [".".join(base + ([node.module] if node.module else []))]
            else:
                names = [node.module or ""]
                names += [f"{node.module}.{alias.name}" for alias in node.names]
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("vpo."):
            names = [node.value]  # a module loaded by name: import_module("vpo.x") or a table of names
        names = {n for n in names if (n == "vpo" or n.startswith("vpo.")) and n.replace(".", "").replace(
            "_", "").isalnum()}
        every |= names
        if node in tree.body:
            top |= names
    return top, every


MODULES = {module_name(p): imports(p) for p in PACKAGE.rglob("*.py")}
EXISTING = set(MODULES)


def test_modules_loaded_by_name_are_seen():
    # the prompt format registry loads the maze's compact format by its module name
    assert "vpo.tasks.maze.format" in MODULES["vpo.formats"][1]


def resolve(name: str) -> str | None:
    """The vpo module an imported name refers to (``vpo.tasks.get_task`` -> ``vpo.tasks``)."""
    while name and name not in EXISTING:
        name = name.rpartition(".")[0]
    return name or None


def targets(module: str, *, lazy: bool = True) -> set[str]:
    top, every = MODULES[module]
    return {t for t in (resolve(n) for n in (every if lazy else top)) if t and t != module}


def within(module: str, *prefixes: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


CORE = ("vpo.weights", "vpo.objective", "vpo.estimators", "vpo.chains", "vpo.metrics", "vpo.goals")
ABOVE_CORE = ("vpo.tasks", "vpo.integrations", "vpo.commands", "vpo.cli", "vpo.demo", "vpo.evaluation",
              "vpo.search", "vpo.report", "vpo.sandbox", "vpo.models", "vpo.export", "vpo.formats",
              "vpo.sampling")


@pytest.mark.parametrize("module", sorted(m for m in MODULES if within(m, *CORE)))
def test_the_core_imports_nothing_above_it(module):
    bad = sorted(t for t in targets(module) if within(t, *ABOVE_CORE))
    assert not bad, f"{module} imports {bad}"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if not within(m, "vpo.commands", "vpo.cli",
                                                                             "vpo.__main__")))
def test_nothing_below_the_cli_imports_the_cli(module):
    bad = sorted(t for t in targets(module) if within(t, "vpo.commands", "vpo.cli"))
    assert not bad, f"{module} imports {bad}"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if within(m, "vpo.integrations", "vpo.evaluation",
                                                                         "vpo.search", "vpo.formats", "vpo.sampling",
                                                                         "vpo.report", "vpo.tasks")))
def test_adapters_and_evaluation_do_not_import_the_demo(module):
    bad = sorted(t for t in targets(module) if within(t, "vpo.demo"))
    assert not bad, f"{module} imports {bad}"


def test_no_import_cycles_at_module_level():
    graph = {m: targets(m, lazy=False) for m in MODULES}
    # a package's __init__ importing its own submodules is how packages re-export: not a cycle
    for m in graph:
        graph[m] = {t for t in graph[m] if not t.startswith(m + ".")}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycle = stack[stack.index(nxt):] + [nxt]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)


def room(module: str) -> str:
    """The room a module lives in: ``vpo.tasks.maze.format`` -> ``vpo.tasks``, ``vpo.formats`` -> itself."""
    return ".".join(module.split(".")[:2])


def real_imports(path: Path) -> set[str]:
    """vpo modules ``path`` imports (lazy imports and ``import_module("vpo....")`` included), with the
    string heuristic of ``imports`` narrowed: a logger's name (``getLogger("vpo.rewards")``) loads nothing."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    loggers = {id(arg) for node in ast.walk(tree) if isinstance(node, ast.Call)
               and getattr(node.func, "attr", getattr(node.func, "id", "")) == "getLogger" for arg in node.args}
    _, every = imports(path)
    named = {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and id(node) in loggers}
    return {t for t in (resolve(n) for n in every - named) if t}


def test_no_arrow_runs_back_up_between_rooms():
    # rooms (a top-level module, or a package with everything in it) import one another one way only:
    # an import that closes a circle between two rooms runs back up, lazy or not
    graph: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        me = room(module_name(path))
        if me == "vpo":
            continue  # the package's face re-exports
        graph.setdefault(me, set()).update(room(t) for t in real_imports(path) if room(t) not in (me, "vpo"))
    reach = {r: set(targets_) for r, targets_ in graph.items()}
    changed = True
    while changed:  # transitive closure: a few dozen rooms
        changed = False
        for r, seen in reach.items():
            more = set().union(*(reach.get(t, set()) for t in seen)) - seen
            if more:
                seen |= more
                changed = True
    back = sorted((a, b) for a, outs in graph.items() for b in outs if a in reach.get(b, ()))
    assert not back, f"imports that close a circle between rooms: {back}"
