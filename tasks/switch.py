"""Switch the running configuration atomically:  pyinfra inventory/prod.py tasks/switch.py --data server=NAME

A new release of the files in place with NAME active: stop -> GPUs verified free -> start ->
readiness gate; when the gate fails, the previous release runs again and the run fails naming
the diagnosis. The next deploy.py switches back to the inventory's active_server.
"""

from sglang_pve.config.tasks import switch_options
from sglang_pve.deploy.context import deployment, task_options
from sglang_pve.deploy.operations import releases
from sglang_pve.provision.roles import is_node

if not is_node():  # a container's task
    config = deployment()
    wanted = task_options(switch_options)
    releases.switched(
        name=f"Switch to {wanted.server}",
        server=wanted.server,
        keep=config.data.releases_kept,
        venvs_dir=config.data.sglang_venvs_dir,
    )
