"""The lab's apt repository: the Debian packages a deploy installs with apt (PACKAGES), served by
the package index beside its wheels, as a flat repository at ``<index>/debian/``.

The guests have no route off the bridge (lab/network.py), so each container's only apt source is
this one (APT_SOURCES, written as its /etc/apt/sources.list like /etc/pip.conf), exactly as a
production container installs from its distribution's mirror. The packages are bookworm's, as the
rootfs debootstrap built lists them (its var/lib/apt/lists/*_Packages, whose Release debootstrap
checked against debian-archive-keyring): each .deb is downloaded once from that mirror into the
cache, checked against the list's SHA256, and published with the list's own stanza (a flat
repository's Filename is relative to its base, so the mirror's pool/ layout is kept).
Their dependencies are in the rootfs already (prometheus-node-exporter 1.5.0-1+b6: adduser, libc6,
init-system-helpers); apt in the guest says so if that ever changes.
"""

import hashlib
import os
import re
import urllib.request
from pathlib import Path

from lab import layout, rootfs
from lab.shell import LabError

PACKAGES = ("prometheus-node-exporter",)  # what sglang_pve/deploy/operations/node_exporter.py installs
DEB_CACHE = layout.CACHE_DIR / "debs"
URL = f"http://{layout.BRIDGE_ADDRESS}:{layout.INDEX_PORT}/debian"
# The repository is unsigned, served only on the bridge: trusted=yes, as pip.conf's trusted-host.
APT_SOURCES = f"# sglang-pve lab: the lab's apt repository (lab/apt_repo.py)\ndeb [trusted=yes] {URL} ./\n"


def stanzas(root: Path, names: tuple[str, ...] = PACKAGES) -> dict[str, str]:
    """Each package's stanza from the rootfs's apt lists (the newest version where several are)."""
    found: dict[str, str] = {}
    for packages in sorted((root / "var/lib/apt/lists").glob("*_Packages")):
        for stanza in packages.read_text().split("\n\n"):
            name = re.match(r"Package: (\S+)\n", stanza)
            if name and name[1] in names:
                found[name[1]] = stanza.strip() + "\n"
    missing = [name for name in names if name not in found]
    if missing:
        raise LabError(f"{', '.join(missing)} not in {root}/var/lib/apt/lists: rebuild the rootfs (rm -rf it; lab up)")
    return found


def field(stanza: str, name: str) -> str:
    return re.search(rf"^{name}: (\S+)$", stanza, re.M)[1]  # type: ignore[index]


def download(stanza: str, mirror: str) -> Path:
    """The stanza's .deb in the cache, downloaded from `mirror` when missing; SHA256 checked."""
    filename, sha256 = field(stanza, "Filename"), field(stanza, "SHA256")
    cached = DEB_CACHE / Path(filename).name
    if cached.is_file() and hashlib.sha256(cached.read_bytes()).hexdigest() == sha256:
        return cached
    DEB_CACHE.mkdir(parents=True, exist_ok=True)
    print(f"lab: downloading {mirror}/{filename} (once)", flush=True)
    with urllib.request.urlopen(f"{mirror}/{filename}", timeout=60) as response:
        data = response.read()
    if hashlib.sha256(data).hexdigest() != sha256:
        raise LabError(f"{mirror}/{filename}: SHA256 is not the rootfs's apt list's; try again or rebuild the rootfs")
    temp = cached.with_name(f".{cached.name}.{os.getpid()}.tmp")
    temp.write_bytes(data)
    temp.replace(cached)  # another slot may write the same file: never a half-written one
    return cached


def write(directory: Path, root: Path) -> None:
    """Lay out the flat repository in `directory`: pool/... and Packages."""
    found = stanzas(root)
    mirror = rootfs.host_mirror()
    for stanza in found.values():
        target = directory / field(stanza, "Filename")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(download(stanza, mirror).read_bytes())
    (directory / "Packages").write_text("\n".join(found[name] for name in sorted(found)))
