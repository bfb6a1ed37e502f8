"""SGLang's detokenizer process: scheduler outputs in, text back to the tokenizer manager."""

from sglang.sim.channels import Channels
from sglang.sim.logs import configure_logger
from sglang.sim.procutil import kill_itself_when_parent_died, set_process_title


def run_detokenizer_process(log_level: str, chans: Channels) -> None:
    """Entry point of the `sglang::detokenizer` process (multiprocessing spawn)."""
    kill_itself_when_parent_died()
    set_process_title("sglang::detokenizer")
    configure_logger(log_level)
    while True:
        chans.to_tokenizer.put(chans.to_detokenizer.get())
