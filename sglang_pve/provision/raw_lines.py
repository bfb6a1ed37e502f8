"""The raw ``lxc.*`` lines of every container of a node, read from its /etc/pve in one command: the
one part of a container's config that GET .../pending leaves out (pve-guest-common GuestHelpers.pm
config_with_pending_array skips the array-valued "lxc" key), so a no-change run reads each
container's config and pending values with that one API call (provision/nodes.py) and this one
node command for all its containers, instead of GET .../config and GET .../pending each.

The lines are the current section's (before the first ``[snapshot]`` or ``[pve:pending]``), parsed
as pve-container's src/PVE/LXC/Config.pm parse_pct_config does (commit 94f5585): ``lxc.KEY: value``
or ``lxc.KEY = value``, blanks around the value dropped; lxc.environment.runtime is not a raw line
there (it becomes ``env``).
"""

import re
import shlex

from pyinfra.api import FactBase

_MARK = "--- sglang-pve CT "
_RAW = re.compile(r"^(lxc\.[a-z0-9_\-\.]+)(:|\s*=)\s*(.*?)\s*$")


def parse_raw_lines(text: list[str]) -> list[list[str]]:
    """[[key, value], ...] of the current section, as GET .../config returns them under "lxc".

    >>> parse_raw_lines(["arch: amd64", "lxc.mount.entry: /a a none bind 0 0", "lxc.cap.drop = ", "[snap]", "lxc.a: 1"])
    [['lxc.mount.entry', '/a a none bind 0 0'], ['lxc.cap.drop', '']]
    """
    lines = []
    for line in text:
        if re.match(r"^\[(pve:pending|[a-z][a-z0-9_\-]+)\]\s*$", line, re.I):
            break
        match = _RAW.match(line)
        if match and match[1] != "lxc.environment.runtime":
            lines.append([match[1], match[3]])
    return lines


class RawLxcLines(FactBase[dict[int, list[list[str]]]]):
    """{vmid: [[key, value], ...]} of the given containers of this node, or of all of them (a vmid
    without a config file here is left out).

    host.get_fact(RawLxcLines, etc_pve="/etc/pve", node="pve1", vmids=[129, 201])
    # {129: [["lxc.mount.entry", "/shared shared none bind,ro,create=dir 0 0"]], 201: []}
    """

    @staticmethod
    def default() -> dict[int, list[list[str]]]:
        return {}

    def command(self, etc_pve: str, node: str, vmids: list[int] | None = None) -> str:
        """vmids None: every container whose config file the node holds."""
        directory = shlex.quote(f"{etc_pve}/nodes/{node}/lxc")
        if vmids is None:
            ids = f'$(for c in {directory}/*.conf; do [ -f "$c" ] && basename "$c" .conf; done)'
        else:
            ids = " ".join(str(int(vmid)) for vmid in sorted(vmids))
        return (
            f"for v in {ids}; do [ -f {directory}/$v.conf ] && echo '{_MARK}'$v && "
            f"sed -n '/^\\[/q;p' {directory}/$v.conf; done; true"
        )

    def process(self, output) -> dict[int, list[list[str]]]:
        found: dict[int, list[str]] = {}
        current: list[str] | None = None
        for line in output:
            if line.startswith(_MARK) and line[len(_MARK) :].isdigit():
                current = found.setdefault(int(line[len(_MARK) :]), [])
            elif current is not None:
                current.append(line)
        return {vmid: parse_raw_lines(text) for vmid, text in found.items()}
