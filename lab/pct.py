#!/usr/bin/python3
"""pct for the lab node pve1: the subcommands operators and the toolkit use, with the real tool's
output (pve-container src/PVE/CLI/pct.pm, read at 94f55852).

Installed as /usr/sbin/pct in pve1; python3 stdlib only. Like the real pct it acts as root@pam on
the local node: list, config, status, start, stop, shutdown, snapshot, listsnapshot, rollback
and delsnapshot go through the node's API (https://127.0.0.1:8006, verified against
/etc/pve/pve-root-ca.pem, password from the root-only /etc/pve/priv/lab-credentials.json) and
wait for their task, as pct's $cmddef entries of PVE::API2::LXC do. These run locally, as in pct.pm:

- exec: its method 'exec': load_config (the CT's config must be on this node:
  /etc/pve/nodes/<nodename>/lxc/<vmid>.conf), "container '<vmid>' not running!", "missing
  command", then lxc-attach; here the attach goes through the lab host's guestd
  (/run/pve-lab/guestd.sock), since this node is itself a container; enter, push and pull too;
- unlock: its method 'unlock': PVE::AbstractConfig remove_lock under lock_config (the CT's flock,
  pve-guest-common src/PVE/AbstractConfig.pm), "no lock found trying to remove any lock".

The node name is PVE::INotify::nodename: uname's nodename without its domain.

    pct list
    pct exec 129 -- nvidia-smi -L
    pct snapshot 129 before-upgrade && pct rollback 129 before-upgrade
    pct unlock 129
"""

import argparse
import json
import os
import ssl
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

sys.path.insert(0, "/usr/share/pve-lab/pve-emulator.pyz")  # the emulator, for its guestd client

API = "https://127.0.0.1:8006/api2/json"
CA_FILE = "/etc/pve/pve-root-ca.pem"
CREDENTIALS = "/etc/pve/priv/lab-credentials.json"
GUESTD_SOCKET = "/run/pve-lab/guestd.sock"
NODE = os.uname().nodename.split(".", 1)[0]


class Api:
    """root@pam's session with the local API (a ticket, its CSRF token for writes)."""

    def __init__(self):
        with open(CREDENTIALS) as file:
            password = json.load(file)["users"]["root@pam"]["password"]
        self.context = ssl.create_default_context(cafile=CA_FILE)
        login = self.request("POST", "/access/ticket", {"username": "root@pam", "password": password})
        self.headers = {
            "Cookie": f"PVEAuthCookie={login['ticket']}",
            "CSRFPreventionToken": login["CSRFPreventionToken"],
        }

    def request(self, method: str, path: str, params: dict | None = None):
        data = urllib.parse.urlencode(params or {}).encode() if method != "GET" else None
        url = API + path + (f"?{urllib.parse.urlencode(params)}" if method == "GET" and params else "")
        request = urllib.request.Request(url, data=data, method=method, headers=getattr(self, "headers", {}))
        try:
            with urllib.request.urlopen(request, context=self.context, timeout=60) as response:
                return json.load(response).get("data")
        except urllib.error.HTTPError as error:
            body = error.read().decode(errors="replace")
            try:
                details = json.loads(body).get("errors") or {}
            except ValueError:
                details = {}
            lines = [f"{key}: {value}" for key, value in details.items()]
            die("\n".join([error.reason, *lines]) if lines else error.reason)
        except urllib.error.URLError as error:
            die(f"{API}: {error.reason} (is pveproxy running? systemctl status pveproxy)")

    def task(self, method: str, path: str, params: dict | None = None) -> None:
        """Run an API call that starts a task and wait for it, as pct does."""
        upid = self.request(method, path, params)
        while True:
            status = self.request("GET", f"/nodes/{NODE}/tasks/{urllib.parse.quote(upid)}/status")
            if status.get("status") == "stopped":
                break
            time.sleep(0.2)
        exitstatus = status.get("exitstatus", "")
        if exitstatus != "OK" and not exitstatus.startswith("WARNINGS"):
            die(exitstatus)


def die(message: str) -> None:
    print(message, file=sys.stderr)
    sys.exit(255)


def ct(vmid: int) -> str:
    return f"/nodes/{NODE}/lxc/{vmid}"


def cmd_list(api: Api, args) -> None:
    rows = sorted(api.request("GET", f"/nodes/{NODE}/lxc"), key=lambda row: int(row["vmid"]))
    print(f"{'VMID':<10} {'Status':<10} {'Lock':<12} {'Name':<20}")
    for row in rows:
        print(f"{row['vmid']:<10} {row['status']:<10} {row.get('lock', ''):<12} {row.get('name', ''):<20}")


def cmd_config(api: Api, args) -> None:
    params = {"snapshot": args.snapshot} if args.snapshot else {}
    config = api.request("GET", f"{ct(args.vmid)}/config", params)
    raw = config.pop("lxc", [])
    config.pop("digest", None)
    for key in sorted(config):
        print(f"{key}: {config[key]}")
    for key, value in raw:
        print(f"{key}: {value}")


def cmd_status(api: Api, args) -> None:
    print(f"status: {api.request('GET', f'{ct(args.vmid)}/status/current')['status']}")


def cmd_lifecycle(api: Api, args) -> None:
    api.task("POST", f"{ct(args.vmid)}/status/{args.command}")


def cmd_snapshot(api: Api, args) -> None:
    params = {"snapname": args.snapname}
    params.update({"description": args.description} if args.description else {})
    api.task("POST", f"{ct(args.vmid)}/snapshot", params)


def cmd_listsnapshot(api: Api, args) -> None:
    snapshots = {s["name"]: s for s in api.request("GET", f"{ct(args.vmid)}/snapshot")}
    children: dict[str, list[str]] = {}
    for name, snap in snapshots.items():
        children.setdefault(snap.get("parent", ""), []).append(name)

    def show(name: str, depth: int) -> None:
        snap = snapshots[name]
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(snap["snaptime"])) if "snaptime" in snap else ""
        description = snap.get("description", "").strip() or "no-description"
        if name == "current":
            when, description = "", "You are here!"
        print(f"{' ' * depth}`-> {name:<20} {when:<19}     {description}")
        for child in sorted(children.get(name, []), key=lambda n: snapshots[n].get("snaptime", 1e12)):
            show(child, depth + 1)

    for root in sorted(children.get("", []), key=lambda n: snapshots[n].get("snaptime", 1e12)):
        show(root, 0)


def cmd_rollback(api: Api, args) -> None:
    params = {"start": 1} if args.start else {}
    api.task("POST", f"{ct(args.vmid)}/snapshot/{args.snapname}/rollback", params)


def cmd_delsnapshot(api: Api, args) -> None:
    api.task("DELETE", f"{ct(args.vmid)}/snapshot/{args.snapname}")


def guestd():
    from pve.guestd import GuestdBackend

    return GuestdBackend(socket=GUESTD_SOCKET)


def attach(vmid: int, command: list[str], stdio: tuple[int, int, int] = (0, 1, 2)) -> int:
    from pve.backend import BackendError

    try:
        return guestd().exec(vmid, command, stdio)
    except BackendError as error:
        die(str(error))


def load_config(vmid: int) -> str:
    """PVE::LXC::Config->load_config on this node: the file's text, or PVE's message."""
    try:
        with open(f"/etc/pve/nodes/{NODE}/lxc/{vmid}.conf", encoding="utf-8") as file:
            return file.read()
    except FileNotFoundError:
        die(f"Configuration file 'nodes/{NODE}/lxc/{vmid}.conf' does not exist")


def cmd_exec(api, args) -> None:
    load_config(args.vmid)  # "test if container exists on this node"
    if guestd().status(args.vmid) != "running":
        die(f"container '{args.vmid}' not running!")
    if not args.extra:
        die("missing command")
    sys.exit(attach(args.vmid, args.extra))


def cmd_unlock(api, args) -> None:
    from pve import conf, pmxcfs
    from pve.configlock import ConfigLocks, LockTimeout

    try:
        with ConfigLocks().held(args.vmid):
            config = conf.parse(load_config(args.vmid))
            if not config.current.pop("lock", None):
                die("no lock found trying to remove any lock")
            pmxcfs.file_set_contents(f"/etc/pve/nodes/{NODE}/lxc/{args.vmid}.conf", conf.render(config).encode())
    except LockTimeout as error:
        die(str(error))


def cmd_enter(api, args) -> None:
    sys.exit(attach(args.vmid, ["/bin/bash", "--login"]))


def cmd_push(api, args) -> None:
    with open(args.file, "rb") as source:
        script = 'cat > "$1" && chmod "$2" "$1"'
        mode = args.perms or oct(os.fstat(source.fileno()).st_mode & 0o7777)[2:]
        code = attach(args.vmid, ["sh", "-c", script, "push", args.destination, mode], (source.fileno(), 1, 2))
    sys.exit(code)


def cmd_pull(api, args) -> None:
    with open(args.destination, "wb") as target:
        sys.exit(attach(args.vmid, ["cat", "--", args.path], (0, target.fileno(), 2)))


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="pct", description="Proxmox Container Toolkit (lab)")
    commands = top.add_subparsers(dest="command", required=True)
    commands.add_parser("list").set_defaults(run=cmd_list, api=True)

    def with_vmid(name: str, run, api: bool = True) -> argparse.ArgumentParser:
        sub = commands.add_parser(name)
        sub.add_argument("vmid", type=int)
        sub.set_defaults(run=run, api=api)
        return sub

    with_vmid("config", cmd_config).add_argument("--snapshot")
    with_vmid("status", cmd_status)
    for name in ("start", "stop", "shutdown"):
        with_vmid(name, cmd_lifecycle)
    snapshot = with_vmid("snapshot", cmd_snapshot)
    snapshot.add_argument("snapname")
    snapshot.add_argument("--description")
    with_vmid("listsnapshot", cmd_listsnapshot)
    rollback = with_vmid("rollback", cmd_rollback)
    rollback.add_argument("snapname")
    rollback.add_argument("--start", type=int, choices=(0, 1), default=0)
    with_vmid("delsnapshot", cmd_delsnapshot).add_argument("snapname")
    with_vmid("exec", cmd_exec, api=False)
    with_vmid("unlock", cmd_unlock, api=False)
    with_vmid("enter", cmd_enter, api=False)
    push = with_vmid("push", cmd_push, api=False)
    push.add_argument("file")
    push.add_argument("destination")
    push.add_argument("--perms")
    pull = with_vmid("pull", cmd_pull, api=False)
    pull.add_argument("path")
    pull.add_argument("destination")
    return top


def main(argv: list[str]) -> None:
    # `pct exec VMID -- CMD...`: everything after "--" is the command, untouched
    head, extra = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    args = parser().parse_args(head)
    args.extra = extra
    args.run(Api() if args.api else None, args)


if __name__ == "__main__":
    main(sys.argv[1:])
