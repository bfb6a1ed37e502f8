"""Roll back to a release (included by tasks/rollback.py, the default mode):

    pyinfra inventory/prod.py tasks/rollback.py [--data to=<release id>] [--data list=1]

    (no data)              the previous release: the last ready one before the newest ready one
                           whose contents differ from it, so rolling back twice changes nothing
                           the second time
    --data to=<id>         that release (ids: --data list=1)
    --data list=1          print the releases as a table; change nothing
    --dry --diff           show every file that would change, as unified diffs

A release rolls back byte for byte: its files from the host's release store, its venv (rebuilt
from its lock with hashes required when it was removed), then the atomic switch to it (stop ->
GPUs free -> start -> readiness gate; the release before stays when the gate fails).
"""

from pyinfra import host, logger
from pyinfra.api.exceptions import PyinfraError

from sglang_pve.config.tasks import rollback_options
from sglang_pve.deploy.context import deployment, package_source, task_options
from sglang_pve.deploy.facts.releases import Releases
from sglang_pve.deploy.operations import files, releases, venvs
from sglang_pve.provision.roles import is_node
from sglang_pve.tools.status_render import releases_table

if not is_node():  # a container's task; a node's rollback is the snapshot mode
    config = deployment()
    wanted = task_options(rollback_options)
    if wanted.list:
        logger.info(releases_table(host.name, host.get_fact(Releases)))
    else:
        report = host.get_fact(Releases, files_of=wanted.to or "previous")
        if report.target is None:
            raise PyinfraError(f"{host.name}: cannot roll back: {report.error}")
        target = report.get(report.target)
        venvs.venv(
            name=f"SGLang {target['sglang_version']} of release {target['id']} (from its lock)",
            path=target["venv"],
            version=target["sglang_version"],
            source=package_source(),  # the switch restores the release's own startup hook into it
            lock=report.lock,
        )
        for path, block in target["blocks"].items():
            files.block(
                name=f"{block['marker']} block in {path} of release {target['id']}",
                path=path,
                marker=block["marker"],
                body=block["body"],
                user=config.data.shell_user,
            )
        releases.rolled_back(
            name=f"Roll back to release {target['id']}",
            to=target["id"],
            keep=config.data.releases_kept,
            venvs_dir=config.data.sglang_venvs_dir,
        )
