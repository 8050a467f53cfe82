"""The project's layout rules: data flows one way through the modules, and modules stay small.

Every `import` counts, a late one inside a function too (it is still a circle).
"""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("keras_bert", "tasks", "exports")


def _imports(path):
    """Project modules imported anywhere in `path`, as dotted names."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from keras_bert import checkpoints` imports a module; `... import BertEncoder`
            # a name of the package: count the module when one exists by that name.
            names = [node.module]
            folder = ROOT / node.module.replace(".", "/")
            names += [f"{node.module}.{alias.name}" for alias in node.names
                      if (folder / f"{alias.name}.py").exists()
                      or (folder / alias.name / "__init__.py").exists()]  # fmt: skip
        else:
            continue
        found.update(name for name in names if name.split(".")[0] in PACKAGES)
    return found


def _graph():
    graph = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            graph[module] = _imports(path) - {module}
    return graph


def _cycle(graph):
    """One import cycle as a list of modules, or None. The package `__init__`s re-export and are
    left out: a module importing its package's public names is not what makes a circle."""
    edges = {m: {d for d in deps if d in graph and d not in PACKAGES}
             for m, deps in graph.items() if m not in PACKAGES}  # fmt: skip
    state = {}

    def visit(module, trail):
        state[module] = "open"
        for dep in sorted(edges[module]):
            if state.get(dep) == "open":
                return trail[trail.index(dep):] + [dep]
            if dep not in state and (found := visit(dep, trail + [dep])):
                return found
        state[module] = "done"
        return None

    for module in sorted(edges):
        if module not in state and (found := visit(module, [module])):
            return found
    return None


def test_the_cycle_finder_finds_a_planted_circle():
    graph = {"keras_bert.a": {"keras_bert.b"}, "keras_bert.b": {"keras_bert.c"},
             "keras_bert.c": {"keras_bert.a"}}  # fmt: skip
    assert _cycle(graph) == ["keras_bert.a", "keras_bert.b", "keras_bert.c", "keras_bert.a"]
    assert _cycle({"keras_bert.a": {"keras_bert.b"}, "keras_bert.b": set()}) is None


def test_no_import_circles():
    assert _cycle(_graph()) is None


@pytest.mark.parametrize("package, forbidden", [
    ("keras_bert", ("tasks", "exports")),
    ("tasks", ("exports",)),
])  # fmt: skip
def test_imports_flow_one_way(package, forbidden):
    wrong = {module: sorted(d for d in deps if d.split(".")[0] in forbidden)
             for module, deps in _graph().items() if module.split(".")[0] == package}  # fmt: skip
    assert {m: d for m, d in wrong.items() if d} == {}


def test_the_library_imports_its_own_modules():
    # Guards the two tests above against a parser that finds nothing.
    graph = _graph()
    assert "keras_bert.model.encoder" in graph["keras_bert.checkpoints"]
    assert "keras_bert.text.tokenizer" in graph["keras_bert.text.preprocessing"]


MOST_LINES = 330  # a module a reader takes in whole


def test_no_module_is_over_the_line_limit():
    sizes = {str(path.relative_to(ROOT)): len(path.read_text().splitlines())
             for package in PACKAGES for path in (ROOT / package).rglob("*.py")}  # fmt: skip
    assert len(sizes) > 40  # the walk found the subpackages' modules
    assert {path: n for path, n in sizes.items() if n > MOST_LINES} == {}
