"""Fixed-length real-text prompts from the public-domain texts in texts/ (see texts/README.md).

    prompts.build(count=10, input_words=200, seed=42)   # the same list for the same arguments

Each prompt is a window of `input_words` consecutive words of one text (the texts joined end to
end, wrapping round), starting at an offset drawn from random.Random(seed). Lengths are fixed in
words, since the controller has no tokenizer: the server reports each prompt's token count
(meta_info.prompt_tokens), and the results carry the total.
"""

import random
from pathlib import Path

TEXTS_DIR = Path(__file__).with_name("texts")


def words() -> list[str]:
    return [word for path in sorted(TEXTS_DIR.glob("*.txt")) for word in path.read_text(encoding="utf-8").split()]


def build(count: int, input_words: int, seed: int) -> list[str]:
    corpus = words()
    rng = random.Random(seed)
    prompts = []
    for _ in range(count):
        start = rng.randrange(len(corpus))
        prompts.append(" ".join(corpus[(start + i) % len(corpus)] for i in range(input_words)))
    return prompts
