"""The names a Python source file binds at its top level, read (not run): a conftest stays a file.
Shared by the citations and layers tests."""

import ast
from functools import cache
from pathlib import Path


@cache
def top_level_names(origin: str) -> set[str]:
    names = set()
    for node in ast.parse(Path(origin).read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
    return names
