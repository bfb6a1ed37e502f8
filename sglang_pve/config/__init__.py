"""Typed model of host data: the one place input is validated (pydantic v2).

deployment = load_deployment(host.name, host.data.dict(), project_dir)
deployment.nccl_env            # {"NCCL_PROTO": "LL", ...} of the active profile
deployment.servers["baseline"].args.as_flags()
"""

from sglang_pve.config.deployment import Deployment, load_deployment
from sglang_pve.config.errors import ConfigError, Problem
from sglang_pve.config.servers import ServerConfig

__all__ = ["ConfigError", "Deployment", "Problem", "ServerConfig", "load_deployment"]
