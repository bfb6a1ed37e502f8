"""Configuration problems, reported all at once, each naming host, key, value and the fix."""

from dataclasses import dataclass

from sglang_pve.config.safe import printable


class Hidden:
    """Stands for a secret in a Problem: a refused secret is never echoed."""

    def __repr__(self) -> str:
        return "<hidden>"


HIDDEN = Hidden()


@dataclass(frozen=True)
class Problem:
    key: str  # dotted path, e.g. "servers.eagle3-2step.speculative-num-steps"
    value: object
    message: str
    fix: str

    def render(self, host: str) -> str:
        shown = repr(self.value)  # repr escapes control characters; overlong values are cut
        shown = shown if len(shown) <= 120 else f"{shown[:100]}... ({len(shown)} characters)"
        return printable(f"{host}: {self.key} = {shown}: {self.message}. Fix: {self.fix}")


class ConfigError(ValueError):
    """Raised before any remote change when host data does not describe a valid deployment."""

    def __init__(self, host: str, problems: list[Problem]):
        self.host = host
        self.problems = problems
        lines = "\n".join(f"  - {p.render(host)}" for p in problems)
        super().__init__(f"invalid configuration for {host} ({len(problems)} problem(s)):\n{lines}")
