"""What an inventory file takes from the environment: the files it names (SSH key, known_hosts,
ssh_config, secrets, CA) checked when the inventory loads, every missing one reported at once
with the variable to set, instead of a traceback from deep inside a connector.

    env = InventoryEnv("inventory/prod.py")
    key = env.file("SGLANG_PVE_SSH_KEY", "~/.ssh/id_ed25519", "the private key that logs in as root")
    env.check()     # raises PyinfraError listing every problem
"""

import os

from pyinfra.api.exceptions import PyinfraError


class InventoryEnv:
    def __init__(self, inventory: str):
        self.inventory = inventory
        self.problems: list[str] = []

    def file(self, variable: str, default: str | None, what: str) -> str | None:
        """The path in $variable (else `default`); a problem when unset or missing."""
        path = os.environ.get(variable) or default
        if not path:
            self.problems.append(f"{variable} is not set: {what}. Fix: export {variable}=/path/to/it")
        elif not os.path.isfile(os.path.expanduser(path)):
            self.problems.append(
                f"{variable} = {path!r}: no such file ({what}). Fix: create it, or export {variable}=/path/to/it"
            )
        return path

    def exists(self, path: str | os.PathLike[str], what: str, fix: str) -> None:
        """A file the inventory reads itself (not named by a variable)."""
        if not os.path.isfile(path):
            self.problems.append(f"{path}: no such file ({what}). Fix: {fix}")

    def value(self, variable: str, what: str, default: str | None = None) -> str | None:
        value = os.environ.get(variable) or default
        if not value:
            self.problems.append(f"{variable} is not set: {what}. Fix: export {variable}=...")
        return value

    def check(self) -> None:
        if self.problems:
            lines = "\n".join(f"  - {problem}" for problem in self.problems)
            raise PyinfraError(f"{self.inventory} cannot be used yet ({len(self.problems)} problem(s)):\n{lines}")
