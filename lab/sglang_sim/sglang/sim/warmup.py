"""SGLang's warm-up thread: poll /model_info, send one real request, declare the server up.

Text models get `POST /generate` "The capital city of France is" (8 tokens; input_ids
[10, 11, 12] with --skip-tokenizer-init); multimodal ones (config.json with vision_config, such
as Kimi-K2.5) get `POST /v1/chat/completions` with an image. Success logs
"The server is fired up and ready to roll!"; failure or a timeout (SGLANG_WARMUP_TIMEOUT) logs
"Initialization failed. warmup error: ..." and kills the whole tree, as SGLang does.
"""

import json
import logging
import os
import threading
import time
import traceback
import urllib.request

from sglang.sim import env
from sglang.sim.channels import Channels
from sglang.sim.faults import Faults
from sglang.sim.procutil import kill_process_tree
from sglang.sim.tokenizer_manager import ServerStatus, TokenizerManager

logger = logging.getLogger(__name__)

# Guess at the warm-up image: any small image will do for the simulator.
WARMUP_IMAGE = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgYGD4DwABBAEAwS2OUAAAAABJRU5ErkJggg=="


def _connect_host(host: str) -> str:
    return "127.0.0.1" if host in ("0.0.0.0", "") else host


def _request(url: str, headers: dict, payload=None, timeout: float = 5.0) -> bytes:
    data = None if payload is None else json.dumps(payload).encode()
    request = urllib.request.Request(url, data=data, headers={**headers, "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return response.read()


def _warmup_request(tm: TokenizerManager) -> tuple:
    """(path, payload) of SGLang's warm-up request for this model."""
    args = tm.args
    if tm.model_config.is_multimodal and not args.skip_tokenizer_init:
        return "/v1/chat/completions", {
            "model": args.served_model_name,
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "Describe this image in a very short sentence."},
                        {"type": "image_url", "image_url": {"url": WARMUP_IMAGE}},
                    ],
                }
            ],
            "max_tokens": 8,
            "temperature": 0,
        }
    prompt = {"input_ids": [10, 11, 12]} if args.skip_tokenizer_init else {"text": "The capital city of France is"}
    return "/generate", {**prompt, "sampling_params": {"temperature": 0, "max_new_tokens": 8}}


def _execute_warmup(tm: TokenizerManager, base_url: str, headers: dict, delay: float) -> None:
    for attempt in range(120):
        time.sleep(delay if attempt == 0 else 1)
        try:
            _request(base_url + "/model_info", headers)
            break
        except OSError:
            continue
    else:
        raise RuntimeError("The server did not answer /model_info after 120 attempts.")
    path, payload = _warmup_request(tm)
    _request(base_url + path, headers, payload, timeout=env.warmup_timeout())


def wait_and_warmup(tm: TokenizerManager, chans: Channels, faults: Faults, delay: float) -> None:
    """Body of the warm-up thread (delay: the simulated length of the warm-up phase)."""
    args = tm.args
    if not args.skip_server_warmup:
        headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
        try:
            _execute_warmup(tm, f"http://{_connect_host(args.host)}:{args.port}", headers, delay)
        except Exception:
            logger.error(f"Initialization failed. warmup error: {traceback.format_exc()}")
            kill_process_tree(os.getpid())
            return
    tm.server_status = ServerStatus.UP
    logger.info("The server is fired up and ready to roll!")
    if faults.wedge_after_ready is not None:
        threading.Timer(faults.wedge_after_ready, chans.wedged.set).start()
