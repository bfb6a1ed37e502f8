"""The packaged deploys: pyinfra ``@deploy`` functions, one module per task, and the whole deploy.

A deploy file (the repository's own deploy.py and tasks/*.py, or a user's) only calls them:

    from sglang_pve.deploys.full import full_deploy

    full_deploy()

Each reads its host's data (validated by sglang_pve.config) and, for the tasks that take them,
its ``--data`` options. The top layer: it may import tools/, provision/, deploy/ and config/;
nothing in the package imports it.
"""

from sglang_pve.deploy import op_order

op_order.install()  # before any deploy adds an operation: pyinfra's order, read without the source lines
