"""The lab's SSH client key and the known_hosts file that pins the containers' host keys."""

from pathlib import Path

from lab import layout
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
    algorithm the client negotiates is verified)."""
    keys = sorted((rootfs / "etc/ssh").glob("ssh_host_*_key.pub"))
    lines = [
        f"{ip} {' '.join(key.read_text().split()[:2])}"
        for ip in layout.HOSTS.values()
        for key in keys
    ]
    layout.KNOWN_HOSTS.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    layout.KNOWN_HOSTS.write_text("\n".join(lines) + "\n")
