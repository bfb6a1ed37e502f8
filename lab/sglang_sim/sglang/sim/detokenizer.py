"""SGLang's detokenizer process: scheduler outputs in, text back to the tokenizer manager.

Fault `wedge_after_ready`: once the launcher flips the wedge switch (after "fired up"), the
detokenizer swallows every output. Generations never finish and /health gets no response
within SGLANG_HEALTH_CHECK_TIMEOUT, so it answers 503 while every process stays alive.
"""

from sglang.sim.channels import Channels
from sglang.sim.logs import configure_logger
from sglang.sim.procutil import kill_itself_when_parent_died, set_process_title


def run_detokenizer_process(log_level: str, chans: Channels) -> None:
    """Entry point of the `sglang::detokenizer` process (multiprocessing spawn)."""
    kill_itself_when_parent_died()
    set_process_title("sglang::detokenizer")
    configure_logger(log_level)
    while True:
        output = chans.to_detokenizer.get()
        if not chans.wedged.is_set():
            chans.to_tokenizer.put(output)
