"""The house's rules, checked: the layers of docs/architecture.md as import-linter's contract, no
import circles, short modules and functions, and an import inside a function only with its reason."""

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parents[1] / "src" / "commodel"
MAX_MODULE_LINES, MAX_FUNCTION_LINES = 400, 80


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(["commodel", *parts])] = path
    return out


def _imports(path: Path, name: str, known: set[str]) -> set[str]:
    """The package's modules ``path`` imports, wherever the import sits."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            candidates = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        elif isinstance(node, ast.Import):
            candidates = [a.name for a in node.names]
        else:
            continue
        for target in candidates:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def test_the_layer_contract_holds():
    linter = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))
    run = subprocess.run([linter], capture_output=True, text=True, cwd=PACKAGE.parents[1], check=False)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert "0 broken" in run.stdout


def test_no_module_imports_another_that_imports_it_back():
    """Tarjan's strongly connected components over every import, in functions too: none has two
    modules."""
    modules = _modules()
    graph = {name: _imports(path, name, set(modules)) for name, path in modules.items()}
    index, low, stack, on, circles = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while (w := stack.pop()) != v:
                on.discard(w)
                component.append(w)
            on.discard(v)
            if component:
                circles.append(sorted([v, *component]))

    sys.setrecursionlimit(10_000)
    for v in graph:
        if v not in index:
            visit(v)
    assert circles == []


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_modules_and_functions_are_short(path):
    text = path.read_text()
    assert len(text.splitlines()) <= MAX_MODULE_LINES
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            assert node.end_lineno - node.lineno + 1 <= MAX_FUNCTION_LINES, node.name


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_an_import_inside_a_function_says_why(path):
    """Imports sit at a module's top, but where one is optional or slow: then a comment on its line,
    or on the line above its block of imports, says which."""
    lines = path.read_text().splitlines()
    for function in ast.walk(ast.parse("\n".join(lines))):
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(function):
            if isinstance(node, ast.Import | ast.ImportFrom):
                row = node.lineno - 1
                while row > 0 and lines[row - 1].strip().startswith(("from ", "import ")):
                    row -= 1
                above = lines[row - 1].strip() if row else ""
                assert "#" in lines[node.lineno - 1] or above.startswith("#"), lines[node.lineno - 1]


@pytest.mark.parametrize(
    "command",
    [
        ["train", "--model", "llama3-8b", "--system", "dgx-h100"],
        ["collective", "allreduce", "--size", "8B:1GiB"],
        ["overlap", "--strategy", "sm-partition"],
        ["comm", "schemes"],
        ["comm", "dispatch", "--tokens", "1:4096"],
        ["compare", "--a", "system=dgx-h100", "--b", "system=dgx-b200", "--common", "model=llama3-8b"],
        ["--hardware", "{overlay}", "train", "--model", "llama3-8b", "--system", "dgx-h100"],
        ["--help"],
    ],
    ids=[
        "train",
        "collective",
        "overlap",
        "comm-schemes",
        "comm-dispatch",
        "compare",
        "train-overlay",
        "help",
    ],
)
def test_one_estimate_from_the_shell_loads_no_heavy_library(command, tmp_path):
    """``commodel --help``, ``train`` (an overlay before it too), ``compare``, ``overlap``, ``comm
    schemes`` and the tables of ``collective`` and ``comm dispatch`` pay for their own imports only: none of pandas,
    scipy, matplotlib, pymoo or Dask, which sweeps and plots need (docs/benchmarks.md times them)."""
    script = (
        "import sys, io, contextlib\n"
        "from commodel.cli import main\n"
        "sys.argv = ['commodel', *sys.argv[1:]]\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    main()\n"
        "heavy = ('pandas', 'scipy', 'matplotlib', 'pymoo', 'dask')\n"
        "print(','.join(m for m in heavy if m in sys.modules))\n"
    )
    overlay = tmp_path / "overlay.toml"  # an overlay before the command: only the command's module loads
    overlay.write_text('[gpus.h100-sxm]\nlaunch_overhead = { value = "4 us", source = "a test" }\n')
    command = [arg.format(overlay=overlay) for arg in command]
    run = subprocess.run([sys.executable, "-c", script, *command], capture_output=True, text=True, check=True)
    assert run.stdout.strip() == ""
