"""EAGLE-3 draft heads SGLang can load for a target (notes/sglang.md section 2).

SGLang replaces the draft's embedding with the target's, so hidden and vocabulary sizes must be
the target's; the target captures the hidden states of the layers the draft names under
eagle_config, and silently uses its defaults when the draft names them anywhere else.
"""

from packaging.version import Version

from sglang_pve.config import Problem
from sglang_pve.deploy.preflight.context_length import text_config

LLAMA_HEAD = "LlamaForCausalLMEagle3"
MLA_HEAD = "Eagle3DeepseekV2ForCausalLM"
MLA_SINCE = (0, 5, 12)  # SGLang #24826
AUX_IDS = "eagle_aux_hidden_state_layer_ids"


def default_aux_layers(layers: int) -> list[int]:
    """The layers the target captures when the draft names none: [2, N//2, N-3]."""
    return [2, layers // 2, layers - 3]


def eagle3_problems(
    name: str, draft_path: str, target: dict, draft: dict, pinned: str
) -> tuple[list[Problem], list[Problem]]:
    """(problems, warnings) of an EAGLE-3 draft's config.json against its target's."""
    key = f"servers.{name}.speculative-draft-model-path"
    problems, warnings = [], []

    def refuse(message: str, fix: str):
        problems.append(Problem(key, draft_path, message, fix))

    text = text_config(target)
    where = "text_config." if text is not target else ""

    def target_value(field: str):
        return text.get(field, target.get(field))

    architecture = (draft.get("architectures") or [None])[0]
    if architecture not in (LLAMA_HEAD, MLA_HEAD):
        refuse(
            f"config.json architectures[0] is {architecture!r}, not an EAGLE-3 head SGLang loads "
            f"({LLAMA_HEAD} or {MLA_HEAD})",
            "use an EAGLE-3 draft in SGLang's format (vLLM speculators-format heads do not load)",
        )
    elif architecture == MLA_HEAD and Version(pinned).release < MLA_SINCE:
        refuse(
            f"{MLA_HEAD} needs SGLang >= 0.5.12 (#24826), the deploy pins {pinned}",
            f"pin sglang_version 0.5.12 or later, or use a {LLAMA_HEAD} head",
        )

    hidden = target_value("hidden_size")
    if hidden is not None and draft.get("hidden_size") != hidden:
        refuse(
            f"draft hidden_size {draft.get('hidden_size')} differs from the target's {where}hidden_size {hidden} "
            "(SGLang gives the draft the target's embedding)",
            f"use a draft trained for this target (hidden_size {hidden})",
        )
    if hidden is not None and draft.get("target_hidden_size") not in (None, hidden):
        refuse(
            f"draft target_hidden_size {draft['target_hidden_size']} differs from "
            f"the target's {where}hidden_size {hidden}",
            "use a draft trained for this target",
        )
    vocab = target_value("vocab_size")
    if vocab is not None and draft.get("vocab_size") != vocab:
        refuse(
            f"draft vocab_size {draft.get('vocab_size')} differs from the target's {where}vocab_size {vocab} "
            "(SGLang gives the draft the target's embedding)",
            f"use a draft trained for this target (vocab_size {vocab})",
        )
    if not draft.get("tie_word_embeddings", False) and "draft_vocab_size" not in draft:
        refuse(
            "untied head (tie_word_embeddings false) without a draft_vocab_size key: SGLang reads "
            "config.draft_vocab_size while loading the draft and fails",
            'add "draft_vocab_size" to its config.json: null for the full vocabulary, or the size of its '
            "pruned vocabulary (then its weights carry d2t)",
        )

    if architecture == MLA_HEAD:
        if draft.get("num_hidden_layers") != 1:
            refuse(
                f"num_hidden_layers is {draft.get('num_hidden_layers')}: SGLang's {MLA_HEAD} supports exactly 1 layer",
                "use a one-layer MLA EAGLE-3 head",
            )
        if draft.get("q_lora_rank") is None:
            refuse(
                f"q_lora_rank is missing or null: SGLang's {MLA_HEAD} needs the MLA query projection rank",
                "use an MLA head whose config.json sets q_lora_rank (e.g. 1536 for Kimi-K2.5)",
            )

    layers = target_value("num_hidden_layers")
    eagle_config = draft.get("eagle_config")
    ids = eagle_config.get(AUX_IDS) if isinstance(eagle_config, dict) else None
    if ids is not None:
        if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
            refuse(
                f"eagle_config.{AUX_IDS} is {ids!r}, not a list of layer numbers",
                "write a list of integers, e.g. [1, 29, 57]",
            )
        elif isinstance(layers, int) and any(not 0 <= i < layers for i in ids):
            outside = [i for i in ids if not 0 <= i < layers]
            refuse(
                f"eagle_config.{AUX_IDS} {ids} names layers {outside} outside the target's {layers} layers "
                f"({where}num_hidden_layers)",
                f"use a draft trained for this target (layer ids 0..{layers - 1})",
            )
    elif AUX_IDS in draft and isinstance(layers, int):
        warnings.append(
            Problem(
                key,
                draft_path,
                f"{AUX_IDS} {draft[AUX_IDS]} is at the top level of config.json, where SGLang ignores it: "
                f"the target captures its default layers {default_aux_layers(layers)} instead",
                f'move it under "eagle_config": {{"{AUX_IDS}": {draft[AUX_IDS]}}} '
                "if the draft was trained on other layers",
            )
        )
    return problems, warnings
