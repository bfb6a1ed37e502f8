"""The deploy of a container that its node provisions in this same run (see connectors/guest.py)."""

from pyinfra import local, logger
from pyinfra.api import FunctionCommand, operation
from pyinfra.api.exceptions import ConnectError, NestedOperationError, PyinfraError
from pyinfra.context import ctx_config, ctx_host


@operation(is_idempotent=False, _set_in_op=False)
def deploy_when_provisioned(tasks: list[str], waiting_for: str):
    """
    Connect to a container once its node has provisioned it, then run the deploy's task files as
    nested operations. --dry shows this one operation: the container's own changes cannot be known
    before it exists.

    + tasks: the task files of the container's deploy, in order
    + waiting_for: why the container is not reachable now (shown in the plan)

    **Example:**

    .. code:: python

        deploy_when_provisioned(name="Deploy after provisioning", tasks=["tasks/sglang.py"],
                                waiting_for=host.connector.pending)
    """
    yield FunctionCommand(_deploy, (tasks,), {})


def _deploy(state, host, tasks: list[str]) -> bool:
    with ctx_host.use(host), ctx_config.use(state.config.copy()):
        try:
            host.connector.connect_now()
            host.log("connected: running the deploy in the new container", logger.info)
            for task in tasks:
                local.include(task)
        except NestedOperationError:
            raise  # pyinfra reports the failed nested operation itself
        except (ConnectError, PyinfraError) as error:
            host.log_styled(str(error), fg="red", log_func=logger.error)
            return False
    return True
