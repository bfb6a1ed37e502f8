"""Simulated SGLang for the sglang-pve lab.

Only the GPUs and SGLang itself are simulated: `python -m sglang.launch_server` parses SGLang's
flags (and `--config FILE`), walks through SGLang's startup phases printing its real log lines,
spawns scheduler/detokenizer processes like SGLang, and serves SGLang's HTTP endpoints.
See README.md next to pyproject.toml for the knobs and the fault-injection file.
"""

from sglang.version import __version__

__all__ = ["__version__"]
