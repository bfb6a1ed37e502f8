"""The validated Deployment of the host pyinfra is currently preparing, built once per host."""

import os
from pathlib import Path

from pyinfra import host, state
from pyinfra.api.exceptions import PyinfraError

from . import paths
from .config import ConfigError, Deployment, load_deployment

_deployments: dict[str, Deployment] = {}


def deployment() -> Deployment:
    """Validate host.data on first use (raises ConfigError before any remote change)."""
    if host.name not in _deployments:
        project = Path(state.cwd or os.getcwd())
        try:
            _deployments[host.name] = load_deployment(host.name, host.data.dict(), project)
        except ConfigError as error:
            raise PyinfraError(str(error)) from None  # pyinfra prints it plainly, no traceback
    return _deployments[host.name]


def task_options(loader):
    """A task's options validated from host.data by `loader(host name, data, deployment)`;
    a ConfigError stops the run plainly, before any remote change."""
    config = deployment()
    try:
        return loader(host.name, host.data.dict(), config)
    except ConfigError as error:
        raise PyinfraError(str(error)) from None


def venv() -> str:
    data = deployment().data
    return paths.venv_path(data.sglang_venvs_dir, data.sglang_version)
