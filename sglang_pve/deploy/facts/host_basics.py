"""What a container's deploy asks of its host before any operation, in one remote command: the
unit host (UnitHostInfo: systemd version, own addresses, IP filter), the venv's site-packages
(VenvSitePackages), the user-space NVIDIA driver (UserSpaceDriver), prometheus-node-exporter
(NodeExporter) and the deploy lock's count (LockCount), each part by its own fact's command and
parser (five commands before; deploy/context.py reads it once per host and run)."""

from dataclasses import dataclass

from pyinfra.api import FactBase

from sglang_pve.agent.contract import TARGET_PYTHON, TEXTFILE_DIR
from sglang_pve.deploy.facts import batched
from sglang_pve.deploy.facts.gpu import UserSpaceDriver
from sglang_pve.deploy.facts.lock import LockCount
from sglang_pve.deploy.facts.node_exporter import NodeExporter
from sglang_pve.deploy.facts.python import VenvSitePackages
from sglang_pve.deploy.facts.unit_host import UnitHost, UnitHostInfo


@dataclass(frozen=True)
class Basics:
    unit_host: UnitHost
    site_packages: str | None  # None: no TARGET_PYTHON on the host
    driver: str | None  # nvidia-smi's answer; None without nvidia-smi
    node_exporter: dict  # NodeExporter's, for the agent's textfile directory (contract.TEXTFILE_DIR)
    lock_count: int | None = None  # LockCount's: read before anything the deploy lock guards


class HostBasics(FactBase[Basics]):
    """UnitHostInfo, VenvSitePackages(venv), UserSpaceDriver, NodeExporter and LockCount in one command.

    host.get_fact(HostBasics, venv="/opt/sglang/venvs/sglang-0.5.16")
    # Basics(unit_host=UnitHost(systemd=252, ...), site_packages=".../lib/python3.11/site-packages", driver="580.95.05",
    #        node_exporter={"version": "1.5.0-1+b6", ...}, lock_count=14)
    """

    def command(self, venv):
        return batched.joined(
            [
                UnitHostInfo().command(),
                batched.requiring(TARGET_PYTHON, VenvSitePackages().command(venv)),
                batched.requiring("nvidia-smi", UserSpaceDriver().command()),
                NodeExporter().command(textfile_dir=TEXTFILE_DIR),
                LockCount().command(),
            ]
        )

    def process(self, output):
        unit_host, purelib, driver, exporter, count = batched.split(output, 5)
        return Basics(
            unit_host=UnitHostInfo().process(unit_host or []),
            site_packages=None if purelib is None else VenvSitePackages().process(purelib),
            driver=None if driver is None else UserSpaceDriver().process(driver),
            node_exporter=NodeExporter().process(exporter or []),
            lock_count=LockCount().process(count or []),
        )
