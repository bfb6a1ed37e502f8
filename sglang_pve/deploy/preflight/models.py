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
                    "not a local directory (a Hugging Face Hub ID?): the server's sandbox has no network but its "
                    "bind and peers (IPAddressDeny=any, deploy/sandbox.py), so neither the preflight's judge nor "
                    "the server can fetch its config or weights from the Hub",
                    f"download it once on the host (hf download {path} --local-dir /models/...; a gated model "
                    "needs HF_TOKEN there) and point the flag at that directory",
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
