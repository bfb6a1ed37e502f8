"""Model directories on the host: each a directory holding a parseable config.json."""

from sglang_pve.config import Problem
from sglang_pve.deploy.facts.preflight import ModelDir


def model_config(key: str, path: str, found: ModelDir) -> tuple[dict | None, list[Problem]]:
    """config.json of the model at `path` (flag `key`), or the problem that stops SGLang reading it."""
    if not found.is_dir:
        if not path.startswith("/"):
            return None, [
                Problem(
                    key,
                    path,
                    "not a local directory: SGLang would fetch it from the Hugging Face Hub at every start",
                    "download it once and point the flag at the local copy",
                )
            ]
        return None, [
            Problem(
                key,
                path,
                "no such directory on the host",
                "put the model there (a directory with its config.json) or correct the path",
            )
        ]
    if found.error:
        return None, [
            Problem(
                key,
                f"{path}/config.json",
                f"config.json {found.error}",
                "copy the model's config.json there again (SGLang reads it before any weight)",
            )
        ]
    return found.config, []
