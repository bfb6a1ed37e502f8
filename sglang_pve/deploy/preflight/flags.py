"""The rendered --config files, judged twice: by this toolkit's config model (canonical dashed
flag names, since argparse silently takes a unique prefix such as speculative-num-step; the
speculative rules) and by the installed SGLang's own parser, whose verdicts the probe brings."""

import yaml
from pydantic import ValidationError

from sglang_pve.config import Problem
from sglang_pve.config.problems import problems_from
from sglang_pve.config.sglang_args import SGLangArgs, check_speculative
from sglang_pve.deploy.facts.preflight import Verdict


def rendered_problems(name: str, text: str) -> list[Problem]:
    """Problems of a rendered server config, e.g. `speculative-num-step: 3` (a prefix argparse takes)."""
    flags = yaml.safe_load(text) or {}
    try:
        args = SGLangArgs.model_validate(flags)
    except ValidationError as exc:
        return problems_from(exc, SGLangArgs, f"servers.{name}.")
    return check_speculative(args, f"servers.{name}")


def verdict_problems(
    name: str, path: str, verdict: Verdict, installed: str, pinned: str
) -> tuple[list[Problem], list[Problem]]:
    """(problems, warnings) from SGLang's verdict; a venv holding another version only warns,
    since the deploy installs the pinned one over it."""
    key = f"servers.{name}"
    if verdict.ok:
        return [], []
    if verdict.ok is None:
        return [], [
            Problem(
                key,
                path,
                f"SGLang {installed} could not judge it: {verdict.error}",
                f"run `python -m sglang.launch_server --config {path}` in the venv to see",
            )
        ]
    if installed != pinned:
        return [], [
            Problem(
                key,
                path,
                f"SGLang {installed} (not the pinned {pinned}) rejects it: {verdict.error}",
                "check it against the pinned version's flags once the deploy has installed it",
            )
        ]
    return [
        Problem(
            key,
            path,
            f"SGLang {installed}'s own parser rejects it: {verdict.error}",
            "correct the server's flags in the servers file as SGLang's message says",
        )
    ], []
