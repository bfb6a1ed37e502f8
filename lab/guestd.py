"""guestd: the lab host's privileged helper that turns pve1's API calls into real containers.

On a Proxmox node, pve-container (running as root on the node) creates and starts the LXC
containers. pve1 is itself a container, so its guests are made next to it by this helper on the
lab host (lab.guests does the work). It listens on GUESTD_SOCKET, bound into pve1 at
/run/pve-lab/guestd.sock, root-only. The protocol is one JSON line per connection each way:

    -> {"op": "start", "vmid": 129, "config_text": "..."}
    <- {"ok": true, "result": null}            or  {"ok": false, "error": "message"}

A start builds the guest's LXC config from the node's own /etc/pve (guests.node_config), not
from the request's config_text, passing only the raw keys lab/lxc_keys.py PASSED names and
resolving device and mount sources without following links (lab/beneath.py).

Ops: create, destroy, start, stop, shutdown, status, hotplug, snapshot, rollback, delete_snapshot (the
emulator's backend interface, lab/pve/backend.py) and exec: the client passes its stdin,
stdout and stderr with the request (SCM_RIGHTS) and the command runs on them through
lxc-attach, so `pct exec` and `pct enter` stream like the real ones; the result is the exit
code. One action per vmid at a time.

Run by `lab up` as a daemon, one per node (pid file, stopped by pid): ``python -m lab.guestd
SOCKET`` (the socket path, this slot's and this node's, also marks the process as ours). A guestd
acts only on its own node's guests: a request for a vmid another node created is refused, as
pve-container on one node never touches another node's containers.
"""

import json
import os
import socket
import socketserver
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

from lab import guests, layout, procs
from lab.shell import LabError


def pid_file(node: layout.LabNode) -> Path:
    return layout.RUN_DIR / ("guestd.pid" if node.name == layout.NODE else f"guestd-{node.name}.pid")


MAX_REQUEST = 1 << 20
ACTIONS = {
    "create": lambda a: guests.create(
        a["vmid"], a["config"], a["template_volid"], a["rootfs_volume"], a.get("ssh_public_keys")
    ),
    "destroy": lambda a: guests.destroy(a["vmid"]),
    "start": lambda a: guests.start(a["vmid"]),  # from /etc/pve itself: the caller's config_text is not read
    "stop": lambda a: guests.stop(a["vmid"]),
    "shutdown": lambda a: guests.shutdown(a["vmid"], a["timeout"]),
    "status": lambda a: guests.status(a["vmid"]),
    "hotplug": lambda a: guests.hotplug(a["vmid"], a["key"], a.get("old"), a.get("new")),
    "snapshot": lambda a: guests.snapshot(a["vmid"], a["name"]),
    "rollback": lambda a: guests.rollback(a["vmid"], a["name"]),
    "delete_snapshot": lambda a: guests.delete_snapshot(a["vmid"], a["name"]),
}


class Handler(socketserver.BaseRequestHandler):
    locks: dict[int, threading.Lock] = defaultdict(threading.Lock)

    def handle(self) -> None:
        fds: list[int] = []
        request = None
        try:
            data, fds, _, _ = socket.recv_fds(self.request, MAX_REQUEST, 3)
            while not data.endswith(b"\n") and len(data) < MAX_REQUEST:
                chunk = self.request.recv(MAX_REQUEST)
                if not chunk:
                    break
                data += chunk
            request = json.loads(data)
            vmid = int(request["vmid"])
            if guests.node_of(vmid) != guests.NODE.name:
                raise LabError(f"CT {vmid} is a guest of {guests.node_of(vmid)}, not of {guests.NODE.name}")
            if request["op"] == "exec":
                if len(fds) != 3:
                    raise LabError("exec needs stdin, stdout and stderr passed with the request")
                result = guests.run_attached(vmid, list(request["command"]), fds)
            elif request["op"] in ACTIONS:
                with self.locks[vmid]:
                    result = ACTIONS[request["op"]](request)
            else:
                raise LabError(f"unknown op {request['op']!r}")
            reply = {"ok": True, "result": result}
        except LabError as error:
            reply = {"ok": False, "error": str(error)}
        except Exception as error:  # a bug: still answer, and say where to look
            reply = {"ok": False, "error": f"guestd: {type(error).__name__}: {error}"}
            print(f"guestd: {request!r}: {error!r}", file=sys.stderr, flush=True)
        finally:
            for fd in fds:
                os.close(fd)
        self.request.sendall(json.dumps(reply).encode() + b"\n")


class Server(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True


def serve(node: layout.LabNode) -> None:
    guests.serve_as(node)
    node.guestd_dir.mkdir(parents=True, exist_ok=True)
    node.guestd_dir.chmod(0o700)
    node.guestd_socket.unlink(missing_ok=True)
    with Server(str(node.guestd_socket), Handler) as server:
        node.guestd_socket.chmod(0o600)
        print(f"guestd: {node.name}'s guests, listening on {node.guestd_socket}", flush=True)
        server.serve_forever()


def pid(node: layout.LabNode = layout.NODES[layout.NODE]) -> int | None:
    return procs.live_pid(pid_file(node), str(node.guestd_socket))


def start(node: layout.LabNode = layout.NODES[layout.NODE]) -> int:
    """Start the node's guestd unless it runs; returns its pid once the socket answers."""
    running = pid(node)
    if running:
        return running
    # lab is no installed package (it is not in the wheel): the daemon, started in /, finds it
    # through the checkout that holds it
    checkout = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [checkout, os.environ.get("PYTHONPATH")]))}
    log = layout.LOG_DIR / ("guestd.log" if node.name == layout.NODE else f"guestd-{node.name}.log")
    argv = [sys.executable, "-m", "lab.guestd", str(node.guestd_socket)]
    started = procs.start_daemon(argv, pid_file(node), log, env)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # (its argv is ours only once it has exec'd)
        try:
            with socket.socket(socket.AF_UNIX) as probe:
                probe.connect(str(node.guestd_socket))
            return started
        except OSError:
            time.sleep(0.05)
    raise LabError(f"{node.name}'s guestd did not start; see {log}")


def stop(node: layout.LabNode = layout.NODES[layout.NODE]) -> int | None:
    stopped = procs.stop(pid_file(node), str(node.guestd_socket))
    node.guestd_socket.unlink(missing_ok=True)
    return stopped


if __name__ == "__main__":
    served = [node for node in layout.NODES.values() if sys.argv[1:] == [str(node.guestd_socket)]]
    if not served:
        sockets = " or ".join(str(node.guestd_socket) for node in layout.NODES.values())
        sys.exit(f"usage: python -m lab.guestd {sockets} (check SGLANG_PVE_LAB_SLOT)")
    serve(served[0])
