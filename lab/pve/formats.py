"""PVE's named string formats (``"format": "pve-vmid"`` in the schema), as pve-common and
pve-container register them. Each checker raises `FormatError` with PVE's own message.

Formats the toolkit's calls can carry are implemented after the Perl verifier named in the
comment; any other named format is accepted as a plain string (`check` returns quietly), which
is looser than PVE: a wrong value there is only caught by a real node.

>>> check("pve-vmid", "99")
Traceback (most recent call last):
...
lab.pve.formats.FormatError: value does not look like a valid VM ID
>>> check("pve-configid-list", "mp0,dev1 unused0")
"""

import ipaddress
import re

CONFIGID_RE = r"[a-z][a-z0-9_-]+"  # JSONSchema.pm $CONFIGID_RE (case-insensitive)
DNS_LABEL = r"([a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?)"


class FormatError(ValueError):
    """A value does not match its named format; str() is PVE's message (without newline)."""


def split_list(text: str) -> list[str]:
    """PVE::ParseUtils::split_list: NUL-separated, else separated by ',', ';' and whitespace."""
    if "\0" in text:
        return text.split("\0")
    return re.sub(r"[,;]", " ", text).split()


def parse_size(value: str) -> int | None:
    """JSONSchema::parse_size: '8', '8G', '512MiB' -> bytes; None when it is no size."""
    m = re.match(r"^(\d+(\.\d+)?)([KMGT](?:iB)?)?$", value)
    if not m:
        return None
    factor = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}.get((m[3] or " ")[0], 1)
    return int(float(m[1]) * factor)


def format_size(size: int) -> str:
    """JSONSchema::format_size: bytes in the largest exact unit (8589934592 -> '8G')."""
    units = ["", "K", "M", "G", "T"]
    i = 0
    while i < len(units) - 1 and size and size % 1024 == 0:
        size, i = size // 1024, i + 1
    return f"{size}{units[i]}"


def _match(pattern: str, value: str, message: str, flags=0) -> None:
    if not re.match(pattern, value, flags):
        raise FormatError(message)


def _vmid(v):  # pve_verify_vmid
    _match(r"^[1-9][0-9]{2,8}$", v, "value does not look like a valid VM ID")


def _node(v):  # pve_verify_node_name
    _match(r"^([a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?)$", v, "value does not look like a valid node name")


def _configid(v):  # pve_verify_configid
    _match(rf"^{CONFIGID_RE}$", v, f"invalid configuration ID '{v}'", re.I)


def _storage_id(v):  # parse_storage_id -> parse_id
    if len(v) < 2:
        raise FormatError(f"storage ID '{v}' cannot be shorter than 2 characters")
    _match(r"^[a-z][a-z0-9\-_.]*[a-z0-9]$", v, f"storage ID '{v}' contains illegal characters", re.I)


def _dns_name(v):  # pve_verify_dns_name
    _match(rf"^({DNS_LABEL}\.)*{DNS_LABEL}$", v, "value does not look like a valid DNS name")


def _disk_size(v):  # pve_verify_disk_size
    if parse_size(v) is None:
        raise FormatError(f"value does not look like a valid disk size: {v}")


def _volume_id(v):  # PVE::Storage::parse_volume_id
    if not re.match(r"^([a-z][a-z0-9\-_.]*[a-z0-9]):(.+)$", v, re.I):
        raise FormatError(f"unable to parse volume ID '{v}'")


def _lxc_mp_string(v):  # PVE::LXC::Config::verify_lxc_mp_string
    if re.search(r"/\.\.?/", v) or re.search(r"/\.\.?$", v) or re.match(r"^\.\./", v):
        raise FormatError(f"{v} contains illegal character sequences")


def _lxc_dev_string(v):  # PVE::LXC::Config::verify_lxc_dev_string
    if re.search(r"/\.\.?(?:/|$)", v) or not v.startswith("/dev/"):
        raise FormatError(f"{v} is not a valid device path")


def _startup_order(v):  # pve_parse_startup_order
    for part in v.split(","):
        if not re.match(r"^((order=)?\d+|up=\d+|down=\d+)$", part):
            raise FormatError("unable to parse startup options")


def _mac(v):  # pve_verify_mac_addr: unicast only
    if not re.match(r"^[a-f0-9][02468ace](?::[a-f0-9]{2}){5}$", v, re.I):
        raise FormatError("value does not look like a valid unicast MAC address")


def _ipv4(v):
    try:
        ipaddress.IPv4Address(v)
    except ValueError:
        raise FormatError("value does not look like a valid IPv4 address") from None


def _ipv6(v):
    try:
        ipaddress.IPv6Address(v)
    except ValueError:
        raise FormatError("value does not look like a valid IPv6 address") from None


def _ipv4_config(v):  # pve_verify_ipv4_config
    if v in ("dhcp", "manual"):
        return
    try:
        ipaddress.IPv4Interface(v)
        if "/" in v:
            return
    except ValueError:
        pass
    raise FormatError("value does not look like a valid ipv4 network configuration")


def _ipv6_config(v):  # pve_verify_ipv6_config
    if v in ("auto", "dhcp", "manual"):
        return
    try:
        ipaddress.IPv6Interface(v)
        if "/" in v:
            return
    except ValueError:
        pass
    raise FormatError("value does not look like a valid ipv6 network configuration")


def _tag(v):  # pve_verify_tag
    _match(r"^(?i:[a-z0-9_][a-z0-9_\-+.]*)$", v, "invalid characters in tag")


def _realm(v):  # pve_verify_realm
    _match(r"^[A-Za-z][A-Za-z0-9\.\-_]+$", v, f"value '{v}' does not look like a valid realm")


CHECKERS = {
    "pve-vmid": _vmid,
    "pve-node": _node,
    "pve-configid": _configid,
    "pve-storage-id": _storage_id,
    "dns-name": _dns_name,
    "disk-size": _disk_size,
    "pve-volume-id": _volume_id,
    "pve-lxc-mp-string": _lxc_mp_string,
    "pve-lxc-dev-string": _lxc_dev_string,
    "pve-startup-order": _startup_order,
    "mac-addr": _mac,
    "ipv4": _ipv4,
    "ipv6": _ipv6,
    "pve-ipv4-config": _ipv4_config,
    "pve-ipv6-config": _ipv6_config,
    "pve-tag": _tag,
    "pve-realm": _realm,
}


def check(name: str, value: str) -> None:
    """JSONSchema::check_format for a named format, with its -list and -opt variants."""
    if name == "regex":
        return
    m = re.match(r"^(.*?)(?:-(list|opt))?$", name)
    base, kind = m[1], m[2]
    checker = CHECKERS.get(base)
    if checker is None:
        return  # not needed by the toolkit's calls: accepted as a string (see module doc)
    if kind == "list":
        for item in split_list(value):
            checker(item)
    elif kind == "opt":
        if value:
            checker(value)
    else:
        checker(value)
