"""Switch the running configuration atomically:  pyinfra inventory/prod.py tasks/switch.py --data server=NAME

A new release of the files in place with NAME active: stop -> GPUs verified free -> start ->
readiness gate; when the gate fails, the previous release runs again and the run fails naming
the diagnosis. The next deploy.py switches back to the inventory's active_server.
"""

from pyinfra import host
from pyinfra.api.exceptions import PyinfraError

from sglang_pve.config import ConfigError
from sglang_pve.config.tasks import SwitchData, task_data
from sglang_pve.context import deployment
from sglang_pve.operations import releases

config = deployment()
try:
    wanted = task_data(SwitchData, host.name, host.data.dict())
except ConfigError as error:
    raise PyinfraError(f"{error}\n  usage: tasks/switch.py --data server=NAME") from None
releases.switched(
    name=f"Switch to {wanted.server}",
    server=wanted.server,
    keep=config.data.releases_kept,
    venvs_dir=config.data.sglang_venvs_dir,
)
