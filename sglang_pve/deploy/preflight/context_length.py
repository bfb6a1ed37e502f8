"""SGLang's context-length derivation from a config.json, and the draft-vs-target rule.

SGLang derives a model's context length from its text config (`get_context_length`,
notes/sglang.md section 2): the first present of CONTEXT_LENGTH_KEYS, times rope_scaling.factor
unless rope_scaling has original_max_position_embeddings or rope_type "llama3"; 2048 without any.
The draft worker runs at the target's length and raises a ValueError, after the target's weights
have loaded, when that exceeds the draft's derived length.

>>> derived_context_length({"max_position_embeddings": 32768, "rope_scaling": {"factor": 4.0}})
(131072, 'max_position_embeddings 32768 x rope_scaling.factor 4.0')
"""

from sglang_pve.config import Problem, ServerConfig

CONTEXT_LENGTH_KEYS = (
    "max_sequence_length",
    "seq_length",
    "max_seq_len",
    "model_max_length",
    "max_position_embeddings",
)
OPT_IN = "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"


def text_config(config: dict) -> dict:
    """The language model's part of a config (multimodal configs nest it, as Kimi-K2.5 does)."""
    nested = config.get("text_config")
    return nested if isinstance(nested, dict) else config


def derived_context_length(config: dict) -> tuple[int, str]:
    """SGLang's derived context length of a model, and how it was derived (for messages)."""
    text = text_config(config)
    prefix = "text_config." if text is not config else ""
    rope = text.get("rope_scaling")
    rope = rope if isinstance(rope, dict) else {}
    factor, note = rope.get("factor") or 1, ""
    if factor != 1 and ("original_max_position_embeddings" in rope or rope.get("rope_type") == "llama3"):
        reason = (
            "original_max_position_embeddings is set"
            if "original_max_position_embeddings" in rope
            else "rope_type llama3"
        )
        factor, note = 1, f"; rope_scaling.factor {rope['factor']} not applied: {reason}"
    for key in CONTEXT_LENGTH_KEYS:
        value = text.get(key)
        if value is not None:
            scaled = f" x rope_scaling.factor {factor}" if factor != 1 else note
            return int(factor * value), f"{prefix}{key} {value}{scaled}"
    return 2048, "no length key in config.json: SGLang's default"


def opted_in(server: ServerConfig) -> bool:
    return server.env.get(OPT_IN, "").strip().lower() in ("1", "true")  # SGLang's get_bool_env_var


def context_problems(server: ServerConfig, target: dict, draft: dict | None) -> tuple[list[Problem], list[Problem]]:
    """(problems, warnings) of the server's context length against the target's and the draft's."""
    name, requested = server.name, server.args.context_length
    derived_target, target_how = derived_context_length(target)
    key = f"servers.{name}.context-length"
    problems, warnings = [], []
    if requested is not None and requested > derived_target:
        message = (
            f"context-length {requested} exceeds the target's derived context length {derived_target} "
            f"({target_how}); SGLang refuses it"
        )
        if opted_in(server):
            warnings.append(
                Problem(key, requested, f"{message} unless {OPT_IN}=1, which the unit sets", "none needed if intended")
            )
        else:
            problems.append(Problem(key, requested, message, f"set context-length to at most {derived_target}"))
    if draft is None:
        return problems, warnings
    context = requested if requested is not None else derived_target
    derived_draft, draft_how = derived_context_length(draft)
    if context <= derived_draft:
        return problems, warnings
    source = "context-length" if requested is not None else f"derived from the target's config.json, {target_how}"
    message = (
        f"the target runs at context length {context} ({source}) but the draft's derived context length "
        f"is {derived_draft} ({draft_how}); SGLang refuses to start (a ValueError, possibly only after the "
        "target's weights have loaded)"
    )
    fix = (
        f"cap it: context-length: {derived_draft} (also saves KV-cache memory); or opt in with "
        f"env: {{{OPT_IN}: 1}}, accepting lower draft acceptance beyond {derived_draft} tokens, the length "
        "the draft was trained for"
    )
    if opted_in(server):
        warnings.append(
            Problem(
                key,
                context,
                f"the target runs at context length {context} ({source}), beyond the draft's "
                f"derived context length {derived_draft} ({draft_how}); the unit's {OPT_IN}=1 lets SGLang "
                "stretch the draft, with lower acceptance past the length it was trained for",
                f"cap context-length at {derived_draft} if long prompts are not needed",
            )
        )
    else:
        problems.append(Problem(key, context, message, fix))
    return problems, warnings
