"""The lab's SSH client key and the known_hosts file that pins the containers' host keys."""

from pathlib import Path

from lab import layout
from lab.files import write_file
from lab.shell import run


def ensure_client_key() -> str:
    """Generate the ed25519 client key once; return its public line.

    A key half-written by a killed run (one of the two files missing) is regenerated.
    """
    public = layout.SSH_KEY.with_suffix(".pub")
    if not (layout.SSH_KEY.exists() and public.exists()):
        layout.SSH_KEY_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)
        layout.SSH_KEY.unlink(missing_ok=True)
        public.unlink(missing_ok=True)
        comment = ["-C", "sglang-pve-lab"]
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", *comment, "-f", str(layout.SSH_KEY)])
    return public.read_text().strip()


def write_known_hosts(rootfs: Path) -> None:
    """Pin every lab host to the host keys baked into the rootfs (all key types, so any
    algorithm the client negotiates is verified). Other lines stay: the pins of pve1's guests,
    which the toolkit learns through the node (`down` removes the file with the guests)."""
    keys = sorted((rootfs / "etc/ssh").glob("ssh_host_*_key.pub"))
    ours = {*layout.HOSTS.values(), *(node.address for node in layout.NODES.values())}
    current = layout.KNOWN_HOSTS.read_text().splitlines() if layout.KNOWN_HOSTS.exists() else []
    lines = [line for line in current if line.split() and line.split()[0] not in ours]
    lines += [f"{ip} {' '.join(key.read_text().split()[:2])}" for ip in sorted(ours) for key in keys]
    layout.KNOWN_HOSTS.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    write_file(layout.KNOWN_HOSTS, ("\n".join(lines) + "\n").encode(), 0o644)
