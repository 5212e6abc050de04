"""The import contracts of .importlinter (DESIGN.md "Layers") hold: `make test` fails on an
upward import, an import cycle, the core importing the nodes, the benchmarks or rclpy; and
imports of mbde modules at module level, files <= 400 lines (the packages' and test/'s)."""
from __future__ import annotations

import ast
import os
import subprocess
import sys

from conftest import REPO

CONFIG = os.path.join(REPO, ".importlinter")
LINT = os.path.join(os.path.dirname(sys.executable), "lint-imports")


def lint(config: str) -> subprocess.CompletedProcess:
    """`lint-imports --config CONFIG` on this checkout (its packages first on the path)."""
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([LINT, "--config", config, "--no-cache"], capture_output=True, text=True,
                          cwd=REPO, env=env, timeout=600)


def test_contracts_kept():
    out = lint(CONFIG)
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-2000:]
    assert "0 broken" in out.stdout


def test_a_broken_contract_fails(tmp_path):
    """The check is live: a contract the code breaks (cli imports errors) makes it fail."""
    with open(CONFIG) as f:
        text = f.read()
    text += ("\n[importlinter:contract:broken-on-purpose]\nname = broken on purpose\ntype = forbidden\n"
             "source_modules =\n    mbde_core.cli\nforbidden_modules =\n    mbde_core.errors\n")
    config = tmp_path / "importlinter.ini"
    config.write_text(text)
    out = lint(str(config))
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-2000:]
    assert "broken on purpose BROKEN" in out.stdout


def test_every_subcommand_is_in_the_independence_contract():
    with open(CONFIG) as f:
        text = f.read()
    commands = sorted(f[:-3] for f in os.listdir(os.path.join(REPO, "mbde_core", "cli")) if f.startswith("cmd_"))
    assert commands and all(f"    mbde_core.cli.{c}\n" in text for c in commands)


# ------------------------------------------------------------------------------ package files
PACKAGES = ("mbde_core", "mbde_nodes", "mbde_bench")


def package_files():
    out = []
    for pkg in PACKAGES:
        for root, _, files in os.walk(os.path.join(REPO, pkg)):
            out += [os.path.join(root, f) for f in files if f.endswith(".py")]
    return sorted(out)


def function_level_imports(path: str) -> list[tuple[int, str]]:
    """(line, text) of the imports of mbde modules inside functions without a `# lazy: <reason>`
    comment on the line or on the comment line right above it."""
    with open(path) as f:
        src = f.read()
    lines = src.splitlines()
    out = []

    def walk(node, in_function):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)) and in_function:
                names = ([a.name for a in child.names] if isinstance(child, ast.Import)
                         else ["." * child.level + (child.module or "")])
                if any(n.startswith(".") or n.split(".")[0] in PACKAGES for n in names):
                    here, above = lines[child.lineno - 1], lines[child.lineno - 2].strip()
                    if "# lazy:" not in here and not above.startswith("# lazy:"):
                        out.append((child.lineno, here.strip()))
            walk(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    walk(ast.parse(src), False)
    return out


def test_imports_of_mbde_modules_at_module_level():
    """Function-level imports only where a measured start-up cost justifies them, each with a
    `# lazy: <reason>` comment (`mbde --help` imports no subcommand module: cli/main.py)."""
    bad = {os.path.relpath(p, REPO): found for p in package_files() if (found := function_level_imports(p))}
    assert not bad, bad


def line_counts_over(paths, limit: int = 400) -> dict[str, int]:
    """{path relative to the checkout: lines} of the files longer than ``limit`` lines."""
    return {os.path.relpath(p, REPO): n for p in paths if (n := sum(1 for _ in open(p))) > limit}


def test_package_files_are_small():
    long = line_counts_over(package_files())
    assert not long, long


def test_test_files_are_small():
    """The tests and their helpers too (test/, test/ros): split by what they hold, shared
    fixtures in conftest.py or a small helper module."""
    tests = [os.path.join(root, f) for root, _, files in os.walk(os.path.join(REPO, "test"))
             for f in files if f.endswith(".py")]
    long = line_counts_over(tests)
    assert len(tests) > 50 and not long, long
