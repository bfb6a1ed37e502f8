"""The emulator's real backend in the lab: every action goes to guestd on the lab host.

pve1 is a container, so it cannot start its guests itself; the lab host's guestd (lab/guestd.py)
does, as real sibling LXC system containers. This client speaks guestd's protocol over the socket
bound into pve1 (one JSON line each way per call; `exec` also passes stdin/stdout/stderr).
Device lookups need no guestd: the node's /dev is right here.

    backend = GuestdBackend(socket="/run/pve-lab/guestd.sock")   # --backend guestd
    backend.start(129, open("/etc/pve/lxc/129.conf").read())
"""

import json
import os
import socket

from .backend import BackendError, DirBackend

MAX_REPLY = 1 << 20


class GuestdBackend:
    def __init__(self, socket: str = "/run/pve-lab/guestd.sock"):  # noqa: A002 (--backend-options)
        self.socket_path = socket

    def call(self, op: str, fds: tuple[int, ...] = (), **arguments):
        """One request to guestd; its result, or BackendError with guestd's message."""
        request = json.dumps({"op": op, **arguments}).encode() + b"\n"
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
                connection.connect(self.socket_path)
                if fds:
                    socket.send_fds(connection, [request], list(fds))
                else:
                    connection.sendall(request)
                reply = b""
                while not reply.endswith(b"\n"):
                    chunk = connection.recv(MAX_REPLY)
                    if not chunk:
                        break
                    reply += chunk
        except OSError as error:
            raise BackendError(f"guestd at {self.socket_path} unreachable: {error}") from None
        try:
            answer = json.loads(reply)
        except ValueError:
            raise BackendError(f"guestd closed the connection during '{op}'") from None
        if not answer.get("ok"):
            raise BackendError(answer.get("error", "guestd failed"))
        return answer.get("result")

    # -- Backend (lab/pve/backend.py) ---------------------------------------------------------
    def create(self, vmid, config, template_volid, rootfs_volume, ssh_public_keys=None):
        self.call(
            "create",
            vmid=vmid,
            config=config,
            template_volid=template_volid,
            rootfs_volume=rootfs_volume,
            ssh_public_keys=ssh_public_keys,
        )

    def destroy(self, vmid):
        self.call("destroy", vmid=vmid)

    def start(self, vmid, config_text):
        self.call("start", vmid=vmid, config_text=config_text)

    def stop(self, vmid):
        self.call("stop", vmid=vmid)

    def shutdown(self, vmid, timeout):
        self.call("shutdown", vmid=vmid, timeout=timeout)

    def status(self, vmid):
        return self.call("status", vmid=vmid)

    def hotplug(self, vmid, key, old, new):
        self.call("hotplug", vmid=vmid, key=key, old=old, new=new)

    def snapshot(self, vmid, name):
        self.call("snapshot", vmid=vmid, name=name)

    def rollback(self, vmid, name):
        self.call("rollback", vmid=vmid, name=name)

    def delete_snapshot(self, vmid, name):
        self.call("delete_snapshot", vmid=vmid, name=name)

    def device(self, path):
        return DirBackend(os.devnull).device(path)  # a DirBackend without a table stats the path

    # -- beyond the interface: pct exec/enter -------------------------------------------------
    def exec(self, vmid: int, command: list[str], stdio: tuple[int, int, int] = (0, 1, 2)) -> int:
        """Run ``command`` in the guest on these file descriptors; its exit code."""
        return self.call("exec", fds=stdio, vmid=vmid, command=command)
