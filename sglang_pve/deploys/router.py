"""SGLang's router of each replica set this container runs the router of (replica_sets ... router.host):
sglang-router at router_version in its own venv (built like SGLang's: locked, moved into place
when complete), one unit per set (its policy and options from data, its key the host's api-key
through the secret channel), and its workers the set's ready replicas: the members whose deploy
did not fail in this run, set through the router's worker API (deploy/operations/router.py)."""

from pyinfra import host
from pyinfra.api import deploy

from sglang_pve.agent import contract
from sglang_pve.deploy import paths, replicas
from sglang_pve.deploy.context import deployment, router_source, unit_host
from sglang_pve.deploy.operations import router as router_ops
from sglang_pve.deploy.operations import venvs
from sglang_pve.deploy.provenance import run_token
from sglang_pve.deploy.render import router_files
from sglang_pve.provision.roles import is_node


@deploy("Router")
def router() -> None:
    """A container's task (inside the deploy's lock); hosts that run no router are skipped."""
    if is_node():
        return
    sets = replicas.routed_by(host)
    if not sets:
        return
    config = deployment()
    version = config.data.router_version
    venv = paths.router_venv_path(config.data.sglang_venvs_dir, version)
    venvs.venv(name=f"sglang-router {version}", path=venv, version=version, source=router_source(), run=run_token())
    for name, replica_set in host.loop(sorted(sets.items())):
        members = {
            replicas.named_host(m).name: replicas.worker_url(replicas.named_host(m)) for m in replica_set.members
        }
        local = replicas.url_of(contract.probe_address(replica_set.router.bind), replica_set.router.port)
        key_file = paths.router_key_path(name) if config.secrets.api_key else None
        router_ops.router_unit(
            name=f"Router of replica set {name} (sglang-router {version})",
            unit=paths.router_unit_name(name),
            files=router_files(config, name, replica_set, venv, sorted(members.values()), unit_host()),
            probe=f"{local}/liveness",  # its workers: the next operation
        )
        router_ops.router_workers(
            name=f"Router of {name}: its ready replicas",
            router=local,
            members=members,
            key_file=key_file,
        )
