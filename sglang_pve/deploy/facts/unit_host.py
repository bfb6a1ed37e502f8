"""What the server unit's hardening depends on, asked of the host, never assumed: the systemd
version (a directive newer than the host's systemd is ignored in a unit file and refused by
systemd-run: deploy/render.py leaves it out) and the host's own IP addresses (the unit's
IPAddressAllow=: the server's ranks reach each other over them, NCCL and gloo bootstrap on the
first non-loopback interface, not on 127.0.0.1).

host.get_fact(UnitHostInfo)  # UnitHost(systemd=252, addresses=("10.0.0.11", "fd00::11"))
"""

import ipaddress
import re
from dataclasses import dataclass

from pyinfra.api import FactBase

_SECTION = "--- sglang-pve addresses"
_VERSION = re.compile(r"^systemd (\d+)\b")


@dataclass(frozen=True)
class UnitHost:
    systemd: int | None = None  # None: unknown (no systemd): every directive is rendered
    addresses: tuple[str, ...] = ()  # the host's own addresses, loopback and link-local excluded
    peers: tuple[str, ...] = ()  # not asked of the host: its replica set's router (deploy/context.py)


UNKNOWN = UnitHost()  # render's default: no host asked (every property, no own address)


def parse(output: list[str]) -> UnitHost:
    version, addresses, in_addresses = None, [], False
    for line in output:
        if line == _SECTION:
            in_addresses = True
        elif in_addresses:
            for word in line.split():
                try:
                    address = ipaddress.ip_address(word.split("%")[0])
                except ValueError:
                    continue  # not an address: nothing of the host's reaches the unit unchecked
                if not (address.is_loopback or address.is_link_local):
                    addresses.append(str(address))
        elif (found := _VERSION.match(line)) and version is None:
            version = int(found.group(1))
    return UnitHost(version, tuple(dict.fromkeys(addresses)))


class UnitHostInfo(FactBase[UnitHost]):
    """`systemctl --version` (first line: "systemd 252 (252.38-1~deb12u1)") and `hostname -I`
    (every address of every interface but loopback and IPv6 link-local; Debian's essential
    hostname package)."""

    def command(self):
        return f"systemctl --version 2>/dev/null | head -n 1; echo '{_SECTION}'; hostname -I 2>/dev/null || true"

    def process(self, output):
        return parse(list(output))
