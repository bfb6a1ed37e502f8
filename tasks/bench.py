"""Benchmark the server configurations:  pyinfra inventory/prod.py tasks/bench.py

    --data configs=baseline,eagle3-3step   which ones (default: all), in that order
    --data sweep=4,8                       concurrency levels after the single-stream run
    --data compare=previous                the change against an earlier run (or its run id)
    --data output_len=256 input_words=200 num_prompts=5 warmup=2 seed=42

Results in bench-results/ (history.jsonl, <run>.md, <run>.png); `--dry` changes nothing.
sglang_pve/deploys/bench.py says what it does."""

from sglang_pve.deploys.bench import bench

bench()
