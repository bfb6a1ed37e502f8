"""What the server unit's hardening depends on, asked of the host, never assumed: the systemd
version (a directive newer than the host's systemd is ignored in a unit file and refused by
systemd-run: deploy/render.py leaves it out) and the host's own IP addresses (the unit's
IPAddressAllow=: the server's ranks reach each other over them, NCCL and gloo bootstrap on the
first non-loopback interface, not on 127.0.0.1); and whether systemd can load its IP filter (a
cgroup BPF program): not where root is root of a user namespace only (an unprivileged container:
/proc/self/uid_map is not the initial namespace's identity map) and kernel.unprivileged_bpf_disabled is set (the Linux
BPF syscall then wants CAP_BPF of the initial namespace; Debian and Ubuntu set it to 2).

host.get_fact(UnitHostInfo)  # UnitHost(systemd=252, addresses=("10.0.0.11", "fd00::11"), ip_filter=True)
"""

import ipaddress
import re
from dataclasses import dataclass

from pyinfra.api import FactBase

_SECTION, _BPF = "--- sglang-pve addresses", "--- sglang-pve bpf"
_VERSION = re.compile(r"^systemd (\d+)\b")


@dataclass(frozen=True)
class UnitHost:
    systemd: int | None = None  # None: unknown (no systemd): every directive is rendered
    addresses: tuple[str, ...] = ()  # the host's own addresses, loopback and link-local excluded
    peers: tuple[str, ...] = ()  # not asked of the host: its replica set's router (deploy/context.py)
    ip_filter: bool | None = None  # systemd can enforce IPAddressDeny/Allow here (None: unknown)


UNKNOWN = UnitHost()  # render's default: no host asked (every property, no own address)


def parse(output: list[str]) -> UnitHost:
    version, addresses, section, bpf = None, [], "", []
    for line in output:
        if line in (_SECTION, _BPF):
            section = line
        elif section == _BPF:
            bpf.append(line.split())
        elif section == _SECTION:
            for word in line.split():
                try:
                    address = ipaddress.ip_address(word.split("%")[0])
                except ValueError:
                    continue  # not an address: nothing of the host's reaches the unit unchecked
                if not (address.is_loopback or address.is_link_local):
                    addresses.append(str(address))
        elif (found := _VERSION.match(line)) and version is None:
            version = int(found.group(1))
    return UnitHost(version, tuple(dict.fromkeys(addresses)), ip_filter=_ip_filter(bpf))


def _ip_filter(lines: list[list[str]]) -> bool | None:
    """[uid_map's first line, unprivileged_bpf_disabled]: False in a user namespace (any map but
    the initial namespace's whole identity, 0 0 4294967295) where unprivileged BPF is off; None
    when either was not read."""
    if len(lines) != 2 or len(lines[0]) != 3 or len(lines[1]) != 1:
        return None
    return lines[0] == ["0", "0", "4294967295"] or lines[1] == ["0"]


class UnitHostInfo(FactBase[UnitHost]):
    """`systemctl --version` (first line: "systemd 252 (252.38-1~deb12u1)"), `hostname -I`
    (every address of every interface but loopback and IPv6 link-local; Debian's essential
    hostname package), root's uid map and kernel.unprivileged_bpf_disabled."""

    def command(self):
        return (
            f"systemctl --version 2>/dev/null | head -n 1; echo '{_SECTION}'; hostname -I 2>/dev/null || true; "
            f"echo '{_BPF}'; head -n 1 /proc/self/uid_map; cat /proc/sys/kernel/unprivileged_bpf_disabled"
        )

    def process(self, output):
        return parse(list(output))
