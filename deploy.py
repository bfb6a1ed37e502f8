"""The whole deploy, in order:  pyinfra inventory/prod.py deploy.py  (add --dry --diff to review).

Proxmox nodes (group pve_nodes) are prepared and provision their containers through the API first;
then every container gets its deploy. A container that does not exist yet is deployed right after
its node created it, in the same run (sglang_pve/provision/connector.py says how).
Host data is validated first, for every host, before any remote command changes anything.
"""

from pyinfra import local

from sglang_pve.deploy.context import deployment
from sglang_pve.provision.guest_deploy import deploy_when_provisioned, nodes_done
from sglang_pve.provision.roles import is_node, own_spec, pending

GUEST_TASKS = [
    "tasks/preflight.py",  # reads the host; refuses before any change
    "tasks/sglang.py",
    "tasks/nccl_env.py",
    "tasks/agent.py",
    "tasks/servers.py",
]

if is_node():
    local.include("tasks/pve_host.py")
    local.include("tasks/containers.py")
nodes_done(name="Nodes prepared and containers provisioned")  # every host: the containers' deploy waits for it
if not is_node():
    own_spec()  # its container spec and deploy data: every problem at once, before any operation
    deployment()
    if pending():
        deploy_when_provisioned(
            name="Deploy into the container once its node provisioned it", tasks=GUEST_TASKS, waiting_for=pending()
        )
    else:
        for task in GUEST_TASKS:
            local.include(task)
