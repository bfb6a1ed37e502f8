"""Launch the inference server: `python -m sglang.launch_server --config FILE [flags]`.

The configuration name used to look up injected faults is the stem of the --config file
(/etc/sglang/servers/eagle3-2step.yaml -> eagle3-2step).
"""

import os
import sys
import warnings
from pathlib import Path
from typing import List, Optional

from sglang.srt.server_args import ServerArgs, prepare_server_args


def config_name(argv: List[str]) -> Optional[str]:
    """The server configuration's name: the --config file's stem, None without --config."""
    if "--config" in argv and argv.index("--config") + 1 < len(argv):
        return Path(argv[argv.index("--config") + 1]).stem
    return None


def run_server(server_args: ServerArgs, name: Optional[str]) -> None:
    """Resolve the arguments (logging SGLang's warnings) and run the server until stopped."""
    from sglang.sim.engine import launch_server
    from sglang.sim.faults import load_faults
    from sglang.sim.logs import configure_logger, configure_uvicorn_loggers

    configure_logger(server_args.log_level)
    configure_uvicorn_loggers(server_args.log_level_http or server_args.log_level)
    faults = load_faults(name, server_args.node_rank)
    server_args.resolve_once()
    launch_server(server_args, faults)


if __name__ == "__main__":
    warnings.warn(
        "'python -m sglang.launch_server' is still supported, but "
        "'sglang serve' is the recommended entrypoint.\n"
        "  Example: sglang serve --model-path <model> [options]",
        UserWarning,
        stacklevel=1,
    )
    server_args = prepare_server_args(sys.argv[1:])
    try:
        run_server(server_args, config_name(sys.argv[1:]))
    finally:
        from sglang.sim.procutil import kill_process_tree

        kill_process_tree(os.getpid(), include_parent=False)
