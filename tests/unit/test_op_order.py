"""deploy/op_order.py's operation order is pyinfra's own (api/util.py get_operation_order_from_stack),
frame for frame, for stacks through this file as the deploy file, a multi-line call, and none."""

from types import SimpleNamespace

import pytest
from pyinfra.api import util as pyinfra_util

from sglang_pve.deploy import op_order
from sglang_pve.deploy.op_order import pyinfra_operation

UPSTREAM = pyinfra_util.get_operation_order_from_stack


def both(state):
    """Each function called from the same line: the frames they see differ only in their own."""
    return [order(state) for order in (UPSTREAM, op_order.operation_order)]


def nested(state, depth):
    if depth:
        return nested(state, depth - 1)
    return both(
        state,
    )  # a call over several lines: its line is where the call starts


@pytest.mark.parametrize("deploy_file", [__file__, "/elsewhere/deploy.py", None])
@pytest.mark.parametrize("cli", [True, False])
def test_the_order_is_pyinfras_own(monkeypatch, deploy_file, cli):
    monkeypatch.setattr(pyinfra_util.pyinfra, "is_cli", cli)
    state = SimpleNamespace(current_deploy_filename=deploy_file, current_op_file_number=3)
    for depth in (0, 4):
        upstream, ours = nested(state, depth)
        assert ours == upstream
        lines = ours[1:] if cli else ours  # after the deploy file's own number
        if deploy_file == "/elsewhere/deploy.py":  # not on the stack: nothing counted
            assert lines == []
        else:  # from this file's first frame (or the outermost) in: this file's calls among them
            assert len(lines) >= depth + 2


def test_install_puts_it_where_pyinfra_calls_it(monkeypatch):
    monkeypatch.setattr(pyinfra_operation, "get_operation_order_from_stack", UPSTREAM)
    op_order.install()
    assert pyinfra_operation.get_operation_order_from_stack is op_order.operation_order
