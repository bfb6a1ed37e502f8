"""/etc/pve/lxc/<vmid>.conf in pve-container's format (PVE::LXC::Config parse_pct_config /
write_pct_config): ``key: value`` lines, raw ``lxc.*`` lines, ``#`` description lines, then
``[pve:pending]`` and ``[snapname]`` sections. The digest is the SHA1 of the whole file text.

>>> text = "#GPU box\\narch: amd64\\ncores: 4\\nparent: pre\\nlxc.cgroup2.devices.allow: c 195:* rwm\\n"
>>> text += "\\n[pre]\\ncores: 2\\nsnaptime: 1700000000\\n"
>>> conf = parse(text)
>>> conf.current["cores"], conf.current["lxc"], conf.description, sorted(conf.snapshots)
('4', [['lxc.cgroup2.devices.allow', 'c 195:* rwm']], 'GPU box\\n', ['pre'])
>>> render(conf) == text
True
"""

import copy
import hashlib
import re
from urllib.parse import quote, unquote

from .errors import ApiError

META_KEYS = ("lxc", "description")


def digest(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


def assert_if_modified(expected: str | None, text: str) -> None:
    """PVE::Tools::assert_if_modified: a client's digest that no longer matches the file."""
    if expected and expected != digest(text):
        raise ApiError("detected modified configuration - file changed by other user? Try again.")


def decode_text(data: str) -> str:  # PVE::ParseUtils::decode_text
    return unquote(data)


def encode_text(text: str) -> str:
    """PVE::ParseUtils::encode_text: control and high-bit characters, ':' and '%' escaped."""
    safe = "".join(chr(c) for c in range(0x20, 0x7F) if chr(c) not in ":%")
    return quote(text, safe=safe)


class Section(dict):
    """One section's keys (values as strings); raw lxc lines under "lxc" as [[key, value]],
    the description (from # lines and description:) under "description"."""


class CTConfig:
    def __init__(self):
        self.current = Section()
        self.pending = Section()
        self.snapshots: dict[str, Section] = {}

    @property
    def description(self) -> str | None:
        return self.current.get("description")

    def copy(self) -> "CTConfig":
        return copy.deepcopy(self)


def parse(text: str) -> CTConfig:
    """parse_pct_config (non-strict: what it would warn about is kept as a raw line)."""
    conf = CTConfig()
    section = conf.current
    descr = ""

    def close(sec, descr):
        if descr:
            sec["description"] = descr

    for line in text.split("\n"):
        if re.match(r"^\s*$", line):
            continue
        if re.match(r"^\[pve:pending\]\s*$", line, re.I):
            close(section, descr)
            descr, section = "", conf.pending
            continue
        if m := re.match(r"^\[([a-z][a-z0-9_\-]+)\]\s*$", line, re.I):
            close(section, descr)
            descr = ""
            section = conf.snapshots.setdefault(m[1], Section())
            continue
        if m := re.match(r"^#(.*)$", line):
            descr += decode_text(m[1]) + "\n"
            continue
        if m := re.match(r"^(lxc\.[a-z0-9_\-.]+)(:|\s*=)\s*(.*?)\s*$", line):
            section.setdefault("lxc", []).append([m[1], m[3]])
        elif m := re.match(r"^(description):\s*(.*\S)\s*$", line):
            descr += decode_text(m[2])
        elif m := re.match(r"^([a-z][a-z_]*\d*):\s*(.+?)\s*$", line):
            section[m[1]] = m[2]
    close(section, descr)
    return conf


def _render_section(sec: dict) -> str:
    out = []
    for line in (sec.get("description") or "").split("\n"):
        if line:
            out.append("#" + encode_text(line) + "\n")
    for key in sorted(k for k in sec if k not in META_KEYS):
        value = str(sec[key])
        if "\n" in value:
            raise ValueError(f"detected invalid newline inside property '{key}'")
        out.append(f"{key}: {value}\n")
    for key, value in sec.get("lxc", []):
        out.append(f"{key}: {value}\n")
    return "".join(out)


def render(conf: CTConfig) -> str:
    """write_pct_config: current section, [pve:pending], then snapshots sorted by name."""
    raw = _render_section(conf.current)
    if conf.pending:
        raw += "\n[pve:pending]\n" + _render_section(conf.pending)
    for name in sorted(conf.snapshots):
        raw += f"\n[{name}]\n" + _render_section(conf.snapshots[name])
    return raw


def current_text(text: str) -> str:
    """The lines above the first [section] header, as in the file (what `pct start` reads)."""
    m = re.search(r"^\[[^\]]+\]\s*$", text, re.M)
    return text[: m.start()] if m else text
