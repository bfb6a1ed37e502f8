"""The cached Debian rootfs every container boots from, as a read-only overlay lower layer.

Built once with debootstrap into ``cache/rootfs.tmp`` and renamed to ``cache/rootfs-<key>``
when complete; the key hashes suite, variant and package list, so changing the list
builds a new rootfs. A finished build left in ``rootfs.tmp`` (debootstrap removed its
``debootstrap/`` dir, wrote var/log/bootstrap.log and installed every package) is adopted;
anything else there is a half-built dir from a killed run and is discarded.
"""

import hashlib
import re
import shutil
import time
from pathlib import Path

from lab import layout, procs
from lab.mounts import unmount_under
from lab.shell import LabError, run

SUITE = "bookworm"
VARIANT = "minbase"
PACKAGES = ("systemd-sysv", "dbus", "openssh-server", "iproute2", "sudo", "procps", "less")
PACKAGES += ("zsh", "python3", "python3-venv", "psmisc")
DEFAULT_MIRROR = "http://deb.debian.org/debian"
# debootstrap checks the Release file's signature against this (the Makefile installs the package):
# without --keyring it may fall back to unverified downloads where no default keyring is found.
KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")
BUILD_DIR = layout.CACHE_DIR / "rootfs.tmp"

SSHD_DROP_IN = """\
# sglang-pve lab: key-only root login, like a hardened production container
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
"""

# pip refuses plain-HTTP indexes except on localhost; the lab's index is HTTP on the bridge
# (production installs from HTTPS indexes and needs no such file). Written into each container's
# upper dir, not the shared rootfs: the bridge address depends on the lab slot.
PIP_CONF = f"""\
# sglang-pve lab: trust the lab's package index ({layout.INDEX_URL})
[global]
trusted-host = {layout.BRIDGE_ADDRESS}
"""


def hosts_file(hostname: str | None = None) -> str:
    """/etc/hosts: the localhost lines, plus the container's own name as Proxmox writes it.

    >>> print(hosts_file("sglang1").splitlines()[-1])
    127.0.1.1 sglang1
    """
    lines = [
        "127.0.0.1 localhost",
        "::1 localhost ip6-localhost ip6-loopback",
        "ff02::1 ip6-allnodes",
        "ff02::2 ip6-allrouters",
    ]
    if hostname:
        lines.append(f"127.0.1.1 {hostname}")
    return "\n".join(lines) + "\n"


def rootfs_dir() -> Path:
    key = hashlib.sha256(f"{SUITE} {VARIANT} {' '.join(PACKAGES)}".encode()).hexdigest()[:12]
    return layout.CACHE_DIR / f"rootfs-{SUITE}-{key}"


def host_mirror(sources: list[Path] | None = None) -> str:
    """The Debian mirror the host's apt uses for the suite, else deb.debian.org.

    Reads one-line (``deb URI SUITE ...``) and deb822 (``URIs:`` / ``Suites:``) sources.
    """
    if sources is None:
        sources = [
            Path("/etc/apt/sources.list"),
            *sorted(Path("/etc/apt/sources.list.d").glob("*")),
        ]
    for source in sources:
        if not source.is_file():
            continue
        text = source.read_text()
        for uri in re.findall(rf"^deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+{SUITE}\s", text, re.M):
            return uri
        for stanza in re.split(r"\n\s*\n", text):
            fields = dict(re.findall(r"^(\w[\w-]*):\s*(.*)$", stanza, re.M))
            if SUITE in fields.get("Suites", "").split() and "deb" in fields.get("Types", "deb").split():
                return fields["URIs"].split()[0]
    return DEFAULT_MIRROR


def installed_packages(root: Path) -> set[str]:
    status = root / "var/lib/dpkg/status"
    if not status.exists():
        return set()
    return {
        package
        for package, state in re.findall(r"^Package: (\S+)\n(?:.+\n)*?Status: (.+)$", status.read_text(), re.M)
        if state == "install ok installed"
    }


def debootstrap_finished(root: Path) -> bool:
    return (
        (root / "var/log/bootstrap.log").exists()
        and not (root / "debootstrap").exists()
        and set(PACKAGES) <= installed_packages(root)
    )


def debootstrap(target: Path) -> None:
    mirror = host_mirror()
    print(f"lab: debootstrap {SUITE} from {mirror} (about a minute, once)", flush=True)
    if not KEYRING.is_file():
        raise LabError(f"{KEYRING} is missing: install debian-archive-keyring (make system-packages does)")
    options = [f"--variant={VARIANT}", f"--include={','.join(PACKAGES)}", f"--keyring={KEYRING}"]
    run(["debootstrap", *options, SUITE, str(target), mirror])


def post_process(root: Path, public_key: str) -> bool:
    """Make the rootfs an SSH target for the lab key; True if anything changed.

    Writes only what differs: the rootfs may be the lower layer of a running container,
    which does not reliably see changes there (it must be restarted when this returns True).
    """
    files = {
        "root/.ssh/authorized_keys": (public_key + "\n", 0o600),
        "etc/ssh/sshd_config.d/sglang-pve-lab.conf": (SSHD_DROP_IN, 0o644),
        "etc/hosts": (hosts_file(), 0o644),
    }
    changed = False
    for relative, (text, mode) in files.items():
        path = root / relative
        if not path.exists() or path.read_text() != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            changed = True
        path.chmod(mode)
    (root / "root/.ssh").chmod(0o700)
    # each container gets its own name (lxc.uts.name); debootstrap copied the build host's
    hostname = root / "etc/hostname"
    if hostname.exists():
        hostname.unlink()
        changed = True
    return changed


def ensure_rootfs(public_key: str) -> tuple[Path, bool]:
    """The post-processed cached rootfs, built or adopted first if needed, and whether
    post-processing changed it."""
    final = rootfs_dir()
    if not final.is_dir():
        if not debootstrap_finished(BUILD_DIR):
            # a killed run can leave its debootstrap running, and mounts inside the target
            procs.kill_all(procs.pids_using(BUILD_DIR))
            unmount_under(BUILD_DIR)
            shutil.rmtree(BUILD_DIR, ignore_errors=True)
            started = time.monotonic()
            debootstrap(BUILD_DIR)
            print(f"lab: rootfs built in {time.monotonic() - started:.0f} s", flush=True)
        BUILD_DIR.rename(final)
    return final, post_process(final, public_key)
