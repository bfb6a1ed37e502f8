"""The channels between the simulated processes (ZMQ sockets and shared state in SGLang).

tokenizer (main process) -> scheduler TP0 -> detokenizer -> tokenizer, plus shared memory the
other ranks and the HTTP side read: TP0's busy flag (other ranks mirror its GPU utilization),
its counters (for /server_info and /metrics), and the wedge switch the launcher flips after
"fired up" for the wedge_after_ready fault (TP0 then stops taking requests).
Built in the main process and handed to children at spawn.
"""

from multiprocessing.context import BaseContext

STAT_FIELDS = (
    "num_running_reqs",
    "gen_throughput",
    "spec_accept_tokens",
    "spec_verify_ct",
    "generation_tokens",
    "prompt_tokens",
    "num_requests",
    "token_usage",
)


class Channels:
    """Queues, flags and counters shared by the server's processes."""

    def __init__(self, ctx: BaseContext):
        self.to_scheduler = ctx.Queue()
        self.to_detokenizer = ctx.Queue()
        self.to_tokenizer = ctx.Queue()
        self.busy = ctx.Value("i", 0, lock=False)
        self.wedged = ctx.Event()
        self._stats = ctx.Array("d", len(STAT_FIELDS), lock=False)

    def stat(self, name: str) -> float:
        return self._stats[STAT_FIELDS.index(name)]

    def set_stat(self, name: str, value: float) -> None:
        self._stats[STAT_FIELDS.index(name)] = value

    def add_stat(self, name: str, value: float) -> None:
        self._stats[STAT_FIELDS.index(name)] += value
