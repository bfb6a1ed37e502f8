"""The deploy files are thin: deploy.py and every tasks/*.py only call packaged deploys
(sglang_pve/deploys), so a user's own deploy file can call the same functions."""

import ast
import importlib

import pytest

from tests.conftest import PROJECT

DEPLOY_FILES = [PROJECT / "deploy.py", *sorted((PROJECT / "tasks").glob("*.py"))]


def _calls(path) -> list[tuple[str, str]]:
    """(module, function) of every call the file makes; fails on any other kind of statement."""
    tree = ast.parse(path.read_text())
    imported, calls = {}, []
    for node in tree.body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # the docstring
        if isinstance(node, ast.ImportFrom) and node.module.startswith("sglang_pve.deploys."):
            imported.update({alias.asname or alias.name: node.module for alias in node.names})
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name):
            calls.append((imported[node.value.func.id], node.value.func.id))
            continue
        raise AssertionError(f"{path.name}:{node.lineno}: a deploy file only imports and calls packaged deploys")
    return calls


@pytest.mark.parametrize("path", DEPLOY_FILES, ids=lambda path: path.name)
def test_a_deploy_file_calls_one_packaged_deploy(path):
    calls = _calls(path)
    assert len(calls) == 1, calls
    module, function = calls[0]
    deploy = getattr(importlib.import_module(module), function)
    assert deploy.deploy_name and callable(deploy._inner)  # pyinfra's @deploy(...) wrapper
