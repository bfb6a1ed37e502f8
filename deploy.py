"""The whole deploy, in order:  pyinfra inventory/prod.py deploy.py  (add --dry --diff to review).

Host data is validated first, for every host, before any remote command changes anything.
"""

from pyinfra import local

from sglang_pve.context import deployment

deployment()
local.include("tasks/preflight.py")  # reads the host; refuses before any change

local.include("tasks/sglang.py")
local.include("tasks/nccl_env.py")
local.include("tasks/agent.py")
local.include("tasks/servers.py")
