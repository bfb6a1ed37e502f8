"""Roll back: to a release (the default mode), or a container to a Proxmox snapshot.

Options (host data or --data):

    rollback=release|snapshot   the mode (default: release)
    to=<release id>             release mode: that release (default: the previous one)
    list=1                      release mode: print the releases as a table; change nothing
    snapshot=NAME               snapshot mode: that snapshot (default: the newest)

A release rolls back byte for byte: its files from the host's release store, its venv (rebuilt
from its lock with hashes required when it was removed), then the atomic switch to it (stop ->
GPUs free -> start -> readiness gate; the release before stays when the gate fails). The
previous release is the last ready one before the newest ready one whose contents differ from
it, so rolling back twice changes nothing the second time. A replica rolls back out of its router,
a TP group's ranks together (refused when the run leaves a rank out): deploy/fleet.py.

A snapshot rollback returns the container's config and root filesystem to a snapshot, then
starts it again; nodes are skipped. The toolkit takes a snapshot (sgpve-<time>-<reason>) before
every run that changes a container's config. On ZFS storage Proxmox rolls back only to the most
recent snapshot; asking for an older one is refused with the names of the newer ones and what to do.
A replica-set member or a TP group's rank is refused (its container would stop and start alone).
"""

from pyinfra import host, logger
from pyinfra.api import deploy
from pyinfra.api.exceptions import PyinfraError

from sglang_pve.config.tasks import rollback_options
from sglang_pve.deploy import fleet
from sglang_pve.deploy.context import deployment, package_source, task_options
from sglang_pve.deploy.facts.releases import Releases
from sglang_pve.deploy.operations import files, releases, venvs
from sglang_pve.deploy.provenance import run_token
from sglang_pve.deploy.render import NCCL_BLOCK_LINE
from sglang_pve.deploys.locked import locked
from sglang_pve.provision.roles import container_node, is_node, own_spec, reachable_node_host
from sglang_pve.provision.snapshot_rollback import rolled_back
from sglang_pve.tools.status_render import releases_table


@deploy("Release rollback")
@locked("rollback")
def release_rollback() -> None:
    """A container's task; a node's rollback is the snapshot mode."""
    if is_node():
        return
    config = deployment()
    wanted = task_options(rollback_options)
    if wanted.list:
        logger.info(releases_table(host.name, host.get_fact(Releases)))
        return
    problem = fleet.group_problem(host, "tasks/rollback.py")
    if problem is not None:
        raise fleet.refused(host, problem)
    report = host.get_fact(Releases, files_of=wanted.to or "previous")
    if report.target is None:
        raise PyinfraError(f"{host.name}: cannot roll back: {report.error}")
    target = report.get(report.target)
    assert target is not None  # the agent reports its target among the releases
    venvs.venv(
        name=f"SGLang {target['sglang_version']} of release {target['id']} (from its lock)",
        path=target["venv"],
        version=target["sglang_version"],
        source=package_source(),  # the switch restores the release's own startup hook into it
        lock=report.lock,
        run=run_token(),
    )
    for path, block in target["blocks"].items():
        files.block(
            name=f"{block['marker']} block in {path} of release {target['id']}",
            path=path,
            marker=block["marker"],
            body=block["body"],
            user=config.data.shell_user,
            shown=NCCL_BLOCK_LINE,
        )
    releases.rolled_back(
        name=f"Roll back to release {target['id']}",
        to=target["id"],
        keep=config.data.releases_kept,
        venvs_dir=config.data.sglang_venvs_dir,
        lease=run_token(),
    )


@deploy("Snapshot rollback")
def snapshot_rollback() -> None:
    """A provisioned container's task (option snapshot=NAME, default the newest); other hosts are skipped.
    A replica or a TP rank is refused: its container would stop and start alone (deploy/fleet.py)."""
    problem = None if is_node() else fleet.snapshot_problem(host)
    if problem is not None:
        raise fleet.refused(host, problem)
    spec = own_spec()
    if spec is not None:
        rolled_back(
            name=f"Roll back container {spec.vmid}",
            spec=spec,
            node=container_node(spec),
            snapshot=host.data.get("snapshot"),
            on_node=reachable_node_host(spec),
        )


MODES = {"release": release_rollback, "snapshot": snapshot_rollback}


@deploy("Rollback")
def rollback() -> None:
    """The mode of host data ``rollback`` (default: release); its operations under this deploy's name."""
    mode = host.data.get("rollback", "release")
    if mode not in MODES:
        raise PyinfraError(
            f"{host.name}: rollback = {mode!r}: not a rollback mode. Fix: add --data rollback={'|'.join(MODES)}"
        )
    MODES[mode]._inner()
