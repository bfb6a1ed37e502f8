"""Typed model of host data: the one place input is validated (pydantic v2).

    deployment = load_deployment(host.name, host.data.dict(), project_dir)
    deployment.nccl_env            # {"NCCL_PROTO": "LL", ...} of the active profile
    deployment.servers["baseline"].args.as_flags()
"""

from .deployment import Deployment, load_deployment
from .errors import ConfigError, Problem
from .servers import ServerConfig

__all__ = ["ConfigError", "Deployment", "Problem", "ServerConfig", "load_deployment"]
