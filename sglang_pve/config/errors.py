"""Configuration problems, reported all at once, each naming host, key, value and the fix."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    key: str  # dotted path, e.g. "servers.eagle3-2step.speculative-num-steps"
    value: object
    message: str
    fix: str

    def render(self, host: str) -> str:
        return f"{host}: {self.key} = {self.value!r}: {self.message}. Fix: {self.fix}"


class ConfigError(ValueError):
    """Raised before any remote change when host data does not describe a valid deployment."""

    def __init__(self, host: str, problems: list[Problem]):
        self.host = host
        self.problems = problems
        lines = "\n".join(f"  - {p.render(host)}" for p in problems)
        super().__init__(f"invalid configuration for {host} ({len(problems)} problem(s)):\n{lines}")
