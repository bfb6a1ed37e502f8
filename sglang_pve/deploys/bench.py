"""Benchmark the server configurations. Options (host data or --data):

    configs=baseline,eagle3-3step   which ones (default: all), in that order
    sweep=4,8                       concurrency levels after the single-stream run
    compare=previous                the change against an earlier run (or its run id)
    output_len=256 input_words=200 num_prompts=5 warmup=2 seed=42
    bench_results_dir=bench-results on the controller, relative to the project directory

Per configuration: a fresh start (SGLang's accept length counts from the start), warm-up, a
single-stream decode run (concurrency 1, fixed lengths, real-text prompts, fixed seed) with a
stdlib client on the target, and the metrics of SGLang's bench_serving; the configuration that
ran before runs again at the end, also after a failure or Ctrl-C. Results: the history
(<bench_results_dir>/history.jsonl, with the host's current release), a table in the output,
<run>.md and <run>.png. `--dry` changes nothing (the benchmark runs at execution time only).
"""

import re
import time
from pathlib import Path

from pyinfra import host, state
from pyinfra.api import deploy
from pyinfra.operations import python

from sglang_pve.config.bench import bench_options
from sglang_pve.deploy.context import deployment, task_options
from sglang_pve.deploy.facts.releases import Releases
from sglang_pve.deploy.provenance import run_token
from sglang_pve.deploy.render import lifecycle_spec, tp_rank
from sglang_pve.deploys.locked import locked
from sglang_pve.provision.roles import is_node
from sglang_pve.tools.bench import prompts, runner


@deploy("Benchmark")
@locked("bench")
def bench() -> None:
    """A container's task; Proxmox nodes are skipped."""
    if is_node():
        return
    config = deployment()
    options = task_options(bench_options)
    names = options.configs or list(config.servers)
    results_dir = Path(options.bench_results_dir)
    if not results_dir.is_absolute():
        results_dir = Path(state.cwd or ".") / results_dir
    specs = {name: lifecycle_spec(server, tp_rank(config, server)) for name, server in config.servers.items()}

    python.call(
        name=f"Benchmark {', '.join(names)} (a fresh start each; the running configuration again at the end)",
        function=runner.run,
        job=runner.Job(
            run_id=f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{re.sub(r'[^A-Za-z0-9._-]', '-', host.name)}",
            configs=names,
            endpoints={name: (spec.host, spec.port) for name, spec in specs.items()},
            all_servers=list(config.servers),
            plan={
                "prompts": prompts.build(options.num_prompts, options.input_words, options.seed),
                "output_len": options.output_len,
                "warmup": options.warmup,
                "num_prompts": options.num_prompts,
                "concurrency": [1, *options.sweep],
                "seed": options.seed,
                "input_words": options.input_words,
            },
            nccl_profile=config.data.nccl_profile,
            sglang_version=config.data.sglang_version,
            results_dir=results_dir,
            lease=run_token(),
            compare=options.compare,
            release=host.get_fact(Releases).current,
            api_key=config.secrets.api_key is not None,
        ),
    )
