"""The lifecycle agent: stdlib-only Python that runs on the target beside each SGLang unit.

It is shipped as one zipapp (`zipapp.build()`), run by the system `/usr/bin/python3` (3.11 on
Debian 12, 3.12 on Ubuntu 24.04), and imports nothing outside the standard library. Each server
unit calls it four times (see `cli` for the commands and exit codes):

    ExecStartPre  = prestart  refuse foreign GPU holders, reap our stale ones, wait for free
                              GPU memory, restart backoff, record the log offset
    ExecStartPost = gate      follow the log through SGLang's startup phases; fail the unit on
                              a stall, the startup deadline or a crash; start the watchdog
    (detached)      watchdog  probe /health_generate; restart a wedged server, fail it at the cap
    ExecStopPost  = poststop  wait until this unit's processes released /dev/nvidia* and the
                              GPU memory is idle

`status --json` reports every server configuration for the pyinfra status fact.
"""
