"""Bodies of SGLang's HTTP API: native endpoints and the OpenAI-compatible ones.

Each handler takes the TokenizerManager and the parsed JSON body and returns either a JSON
value (dict/list) or, for `"stream": true`, an iterator of Server-Sent-Events byte chunks
ending with `data: [DONE]`.
"""

import dataclasses
import json
import time
import uuid
import zlib
from typing import Iterator, List, Optional, Union

from sglang.sim.perf import count_prompt_tokens
from sglang.sim.tokenizer_manager import GenerateSpec, TokenizerManager
from sglang.version import __version__

IMAGE_TOKENS = 256  # guess: prompt tokens one image adds
GENERATE_DEFAULT_MAX_NEW_TOKENS = 128  # SGLang's SamplingParams default
COMPLETIONS_DEFAULT_MAX_TOKENS = 16  # OpenAI's default for /v1/completions

Body = Union[dict, list, Iterator[bytes]]


class ApiError(Exception):
    """A request SGLang would refuse with `status`."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def _sse(obj) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def _sse_done() -> bytes:
    return b"data: [DONE]\n\n"


def _token_ids(words: List[str]) -> List[int]:
    return [zlib.crc32(word.encode()) % 163840 for word in words]


def model_info(tm: TokenizerManager) -> dict:
    cfg = tm.model_config
    return {
        "model_path": tm.args.model_path,
        "tokenizer_path": tm.args.tokenizer_path,
        "is_generation": True,
        "preferred_sampling_params": None,
        "weight_version": "default",
        "has_image_understanding": cfg.is_multimodal,
        "has_audio_understanding": False,
        "model_type": cfg.model_type,
        "architectures": cfg.hf_config.get("architectures"),
    }


def server_info(tm: TokenizerManager) -> dict:
    internal_state = {
        "last_gen_throughput": tm.chans.stat("gen_throughput"),
        "memory_usage": tm.scheduler_info["memory_usage"],
    }
    verify_ct = tm.chans.stat("spec_verify_ct")
    if tm.args.is_speculative and verify_ct:
        internal_state["avg_spec_accept_length"] = tm.chans.stat("spec_accept_tokens") / verify_ct
    info = {key: tm.scheduler_info[key] for key in ("max_total_num_tokens", "max_req_input_len")}
    return {
        **dataclasses.asdict(tm.args),
        **info,
        "internal_states": [internal_state],
        "version": __version__,
    }


def list_models(tm: TokenizerManager) -> dict:
    name = tm.args.served_model_name
    return {
        "object": "list",
        "data": [
            {
                "id": name,
                "object": "model",
                "created": int(time.time()),
                "owned_by": "sglang",
                "root": name,
                "max_model_len": tm.context_len,
            }
        ],
    }


def _sampling_spec(
    prompt_key: str,
    tokens: int,
    max_new: Optional[int],
    stream: bool,
    temperature: Optional[float],
    seed: Optional[int],
) -> GenerateSpec:
    if max_new is not None and (not isinstance(max_new, int) or max_new < 0):
        raise ApiError(400, f"max_new_tokens must be a non-negative integer, got {max_new!r}")
    return GenerateSpec(prompt_key, tokens, max_new, stream, seed, greedy=temperature == 0)


def generate(tm: TokenizerManager, body: dict) -> Body:
    """POST /generate: {"text" | "input_ids", "sampling_params", "stream"}."""
    params = body.get("sampling_params") or {}
    stream = bool(body.get("stream"))
    if body.get("input_ids") is not None:
        ids = body["input_ids"]
        batch = bool(ids) and isinstance(ids[0], list)
        prompts = [(json.dumps(x), len(x)) for x in (ids if batch else [ids])]
    elif body.get("text") is not None:
        batch = isinstance(body["text"], list)
        prompts = [(t, count_prompt_tokens(t)) for t in (body["text"] if batch else [body["text"]])]
    else:
        raise ApiError(400, "Either text or input_ids should be provided.")
    max_new = params.get("max_new_tokens", GENERATE_DEFAULT_MAX_NEW_TOKENS)
    specs = [
        _sampling_spec(key, n, max_new, stream, params.get("temperature", 1.0), params.get("sampling_seed"))
        for key, n in prompts
    ]
    outputs = _run(tm, specs)
    if stream:
        return _generate_stream(outputs, batch)
    results = _collect(outputs, len(specs))
    bodies = [_generate_body(words, meta, stamp) for words, meta, stamp in results]
    return bodies if batch else bodies[0]


def _run(tm: TokenizerManager, specs: List[GenerateSpec]):
    """Check the lengths now, so a refusal comes before any response; generation starts
    when the returned iterator is consumed."""
    try:
        for spec in specs:
            tm.check_length(spec)
    except ValueError as e:
        raise ApiError(400, str(e)) from None
    tic = time.monotonic()
    return ((index, output, time.monotonic() - tic) for index, output in tm.generate(specs))


def _collect(outputs, n: int) -> list:
    words: List[List[str]] = [[] for _ in range(n)]
    results: list = [None] * n
    for index, output, latency in outputs:
        words[index] += output["words"]
        if output["done"]:
            results[index] = (words[index], output["meta"], latency)
    return results


def _generate_body(words: List[str], meta: dict, latency: float) -> dict:
    return {
        "text": " ".join(words),
        "output_ids": _token_ids(words),
        "meta_info": {**meta, "e2e_latency": round(latency, 4)},
    }


def _generate_stream(outputs, batch: bool) -> Iterator[bytes]:
    words: dict = {}
    for index, output, latency in outputs:
        words.setdefault(index, []).extend(output["words"])
        chunk = _generate_body(words[index], output["meta"] or {}, latency)
        chunk["meta_info"].setdefault("finish_reason", None)
        chunk["meta_info"].setdefault("completion_tokens", len(words[index]))
        if batch:
            chunk["index"] = index
        yield _sse(chunk)
    yield _sse_done()


def _chat_prompt(messages: list) -> tuple:
    """(prompt key, prompt tokens) of a chat: text words, images, template overhead."""
    tokens, parts = 1, []
    for message in messages:
        content = message.get("content") or ""
        tokens += 3
        for part in content if isinstance(content, list) else [{"type": "text", "text": content}]:
            if part.get("type") == "text":
                parts.append(part.get("text", ""))
                tokens += len(part.get("text", "").split())
            else:
                tokens += IMAGE_TOKENS
    return "\n".join(parts), tokens


def openai_completion(tm: TokenizerManager, body: dict, chat: bool) -> Body:
    """POST /v1/chat/completions (chat=True) and /v1/completions."""
    if chat:
        if not body.get("messages"):
            raise ApiError(400, "messages is required")
        key, tokens = _chat_prompt(body["messages"])
        max_new = body.get("max_completion_tokens", body.get("max_tokens"))
    else:
        prompt = body.get("prompt")
        if prompt is None:
            raise ApiError(400, "prompt is required")
        key = prompt if isinstance(prompt, str) else json.dumps(prompt)
        tokens = count_prompt_tokens(key)
        max_new = body.get("max_tokens", COMPLETIONS_DEFAULT_MAX_TOKENS)
    stream = bool(body.get("stream"))
    spec = _sampling_spec(key, tokens, max_new, stream, body.get("temperature", 1.0), body.get("seed"))
    outputs = _run(tm, [spec])
    response_id = uuid.uuid4().hex if chat else f"cmpl-{uuid.uuid4().hex}"
    common = {"id": response_id, "created": int(time.time()), "model": tm.args.served_model_name}
    if stream:
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        return _openai_stream(outputs, common, chat, tokens, include_usage)
    words, meta, _ = _collect(outputs, 1)[0]
    text = " ".join(words)
    choice = {
        "index": 0,
        "logprobs": None,
        "finish_reason": meta["finish_reason"]["type"],
        "matched_stop": meta["finish_reason"].get("matched"),
    }
    if chat:
        choice["message"] = {"role": "assistant", "content": text, "reasoning_content": None, "tool_calls": None}
    else:
        choice["text"] = text
    return {
        **common,
        "object": "chat.completion" if chat else "text_completion",
        "choices": [choice],
        "usage": _usage(tokens, meta["completion_tokens"]),
    }


def _usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
        "prompt_tokens_details": None,
    }


def _openai_stream(outputs, common: dict, chat: bool, prompt_tokens: int, include_usage: bool) -> Iterator[bytes]:
    obj = "chat.completion.chunk" if chat else "text_completion"
    first = True
    for _, output, _ in outputs:
        text = " ".join(output["words"])
        if chat:
            delta = {"role": "assistant", "content": text} if first else {"content": text}
            choice = {"index": 0, "delta": delta}
        else:
            choice = {"index": 0, "text": text}
        meta = output["meta"]
        choice["finish_reason"] = meta["finish_reason"]["type"] if meta else None
        choice["logprobs"] = None
        yield _sse({**common, "object": obj, "choices": [choice], "usage": None})
        first = False
        if meta and include_usage:
            yield _sse(
                {**common, "object": obj, "choices": [], "usage": _usage(prompt_tokens, meta["completion_tokens"])}
            )
    yield _sse_done()
