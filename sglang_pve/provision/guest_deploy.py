"""The deploy of a container that its node provisions in this same run (see provision/connector.py)."""

from collections.abc import Callable

from pyinfra import host, logger
from pyinfra.api import FunctionCommand, operation
from pyinfra.api.exceptions import ConnectError, NestedOperationError, PyinfraError
from pyinfra.context import ctx_config, ctx_host


@operation()
def nodes_done():
    """
    A barrier: called at the same line by every host, it is one operation in pyinfra's order, so
    what follows it on any host runs only after what precedes it on every host (pyinfra orders
    operations by each host's own sequence; hosts are otherwise independent). It changes nothing.

    **Example:**

    .. code:: python

        if is_node():
            provision_containers()
        nodes_done(name="Containers provisioned")
        if not is_node():
            sglang_venv()
    """
    host.noop("a barrier: the operations before it ran on every host")
    return
    yield  # a generator, as pyinfra operations are


@operation(is_idempotent=False, _set_in_op=False)
def deploy_when_provisioned(deploy: Callable[[], object], waiting_for: str):
    """
    Connect to a container once its node has provisioned it, then call its deploy, whose
    operations run as nested operations. --dry shows this one operation: the container's own
    changes cannot be known before it exists.

    + deploy: the container's deploy (a function calling pyinfra ``@deploy`` functions or operations)
    + waiting_for: why the container is not reachable now (shown in the plan)

    **Example:**

    .. code:: python

        deploy_when_provisioned(name="Deploy after provisioning", deploy=sglang_venv,
                                waiting_for=host.connector.pending)
    """
    yield FunctionCommand(_deploy, (deploy,), {})


def _deploy(state, host, deploy: Callable[[], object]) -> bool:
    with ctx_host.use(host), ctx_config.use(state.config.copy()):
        try:
            host.connector.connect_now()
            host.log("connected: running the deploy in the new container", logger.info)
            deploy()
        except NestedOperationError:
            raise  # pyinfra reports the failed nested operation itself
        except (ConnectError, PyinfraError) as error:
            host.log_styled(str(error), fg="red", log_func=logger.error)
            return False
    return True
