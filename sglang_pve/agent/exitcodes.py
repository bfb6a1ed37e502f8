"""Exit codes of the agent's commands; `systemctl status` shows them as `status=N`.

| code | meaning                                                                          |
|------|----------------------------------------------------------------------------------|
| 0    | success                                                                          |
| 2    | bad usage or invalid spec (the message names the file and key)                   |
| 3    | prestart refused: /dev/nvidia* held by a foreign process or another running unit, |
|      | or the unit's files are neither the current release's nor a pending switch's     |
| 4    | GPUs not free in time: our processes survived SIGKILL or memory stayed in use    |
| 5    | gate: startup stalled (no log progress for the phase's stall timeout)            |
| 6    | gate: startup deadline (startup_timeout_s) exceeded                              |
| 7    | gate: the server crashed during startup (fatal log line or main PID gone);       |
|      | poststop: the server ended by itself after ready (no stop was requested)         |
| 8    | watchdog: restart cap reached, the unit was failed                               |
| 9    | switch: the new release did not become ready; the previous one runs again        |
| 10   | switch: failed and could not revert (or there was nothing to revert to)          |
| 11   | lock: another run holds the container's deploy lock (the message names it), or   |
|      | the SSH connection the lock command came through is gone (nothing to watch)      |
| 12   | gate or watchdog: a TP group peer is gone (peers.py); the group fails as one      |
| 13   | router: the replica could not be taken out of its router, or not added back      |
| 14   | switch of a TP group's rank (--no-revert): it failed; the group reverts as one    |
| 70   | internal error of the agent (traceback on stderr)                                |
"""

OK = 0
USAGE = 2
REFUSED = 3
GPUS_BUSY = 4
STALL = 5
DEADLINE = 6
CRASH = 7
RESTART_CAP = 8
SWITCH_REVERTED = 9
SWITCH_FAILED = 10
LOCKED = 11
PEER_GONE = 12
ROUTER = 13
GROUP_FAILED = 14
INTERNAL = 70
