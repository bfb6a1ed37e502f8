"""Benchmark the server configurations. Options (host data or --data):

    configs=baseline,eagle3-3step   which ones (default: all), in that order
    sweep=4,8                       concurrency levels after the single-stream run
    compare=previous                the change against an earlier run (or its run id)
    output_len=256 input_words=200 num_prompts=5 warmup=2 seed=42
    bench_results_dir=bench-results on the controller, relative to the project directory
    promote=1                       then make the winner the active configuration (below)
    promote_by=8                    judged at that sweep level's output tok/s (default 1: single-stream)

Per configuration: a fresh start (SGLang's accept length counts from the start), warm-up, a
single-stream decode run (concurrency 1, fixed lengths, real-text prompts, fixed seed) with a
stdlib client on the target, and the metrics of SGLang's bench_serving; the configuration that
ran before runs again at the end, also after a failure or Ctrl-C. Results: the history
(<bench_results_dir>/history.jsonl, with the host's current release), a table in the output,
<run>.md and <run>.png; the last figures per configuration also go to node_exporter's textfile
directory on the host (tools/bench/exported.py). `--dry` changes nothing (the benchmark runs at
execution time only).

promote=1: at the end of the run, in place of the restore, the fastest configuration by output
tok/s at promote_by (single-stream by default, or a sweep level), when its margin over the current
one exceeds the noise and no row failed, becomes the active one through the atomic switch
(tasks/switch.py's release, gate and revert to what ran before), and, once its gate passed, the
host's active_server in group_data/bench_promoted.yml for the next deploy (tools/bench/promote.py).
Refused before anything runs when the host has no release yet or configs leaves out the current
configuration; `--dry` says what the run would decide between and what it would change.

A member of a replica set is benched out of its set's router (the agent's router-leave: removed
through the worker API, drained; router-join puts what runs back at the end), the other replicas
serving; members benched in one run take turns by the set's max_unavailable (deploy/rollout.py).
Its promoted winner is the set's: written for every member, the next deploy rolls the others to
it. A TP group's rank is refused (deploy/fleet.py says why and what to run instead).
"""

import re
import time
from pathlib import Path

from pyinfra import host, logger, state
from pyinfra.api import deploy
from pyinfra.api.exceptions import PyinfraError
from pyinfra.operations import python

from sglang_pve.config import ConfigError, Problem
from sglang_pve.config.bench import bench_options
from sglang_pve.deploy import fleet
from sglang_pve.deploy.context import deployment, task_options
from sglang_pve.deploy.facts.releases import Releases
from sglang_pve.deploy.operations import releases
from sglang_pve.deploy.provenance import run_token
from sglang_pve.deploy.render import lifecycle_spec, tp_rank
from sglang_pve.deploys.locked import locked
from sglang_pve.provision.roles import is_node
from sglang_pve.tools import host_files
from sglang_pve.tools.bench import promote, prompts, runner


@deploy("Benchmark")
@locked("bench")
def bench() -> None:
    """A container's task; Proxmox nodes are skipped."""
    if is_node():
        return
    problem = fleet.bench_problem(host)
    if problem is not None:
        raise fleet.refused(host, problem)
    where = fleet.place(host)
    config = deployment()
    options = task_options(bench_options)
    names = options.configs or list(config.servers)
    results_dir = Path(options.bench_results_dir)
    if not results_dir.is_absolute():
        results_dir = Path(state.cwd or ".") / results_dir
    specs = {name: lifecycle_spec(server, tp_rank(config, server)) for name, server in config.servers.items()}
    report = host.get_fact(Releases)
    promotions = _promotions(report.current_record, names, config, options.promote_by) if options.promote else {}

    python.call(
        name=f"Benchmark {', '.join(names)} (a fresh start each; the running configuration again at the end"
        + (f"; out of the router of replica set {where.name} meanwhile)" if isinstance(where, fleet.Replica) else ")"),
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
            release=report.current,
            api_key=config.secrets.api_key is not None,
            promotions=promotions,
            active=report.current_record["active_server"] if report.current_record else None,
            promote_by=options.promote_by,
            project_dir=Path(state.cwd or "."),
            replica_set=where.name if isinstance(where, fleet.Replica) else None,
            members=tuple(where.replica_set.members) if isinstance(where, fleet.Replica) else (),
        ),
    )


def _promotions(current: dict | None, names: list[str], config, promote_by: int) -> dict:
    """configuration -> the agent command that makes it the active one (releases.switch_to), built
    now from the current release; refused before anything runs when there is none to compare with."""
    active = current["active_server"] if current else None
    if current is None or active is None or active not in names:
        problem = (
            Problem("promote", "1", "the host has no release running a server yet", "run deploy.py first")
            if active is None
            else Problem("configs", ",".join(names), f"leaves out {active}, the current configuration", f"add {active}")
        )
        raise PyinfraError(str(ConfigError(host.name, [problem]))) from None
    metric = "single-stream output tok/s" if promote_by == 1 else f"output tok/s at concurrency {promote_by}"
    logger.info(
        f"{host.print_prefix}bench: promote=1: after the run, the fastest of {', '.join(names)} by {metric}, "
        f"if beyond the noise over {active} (now active), is switched to atomically (gate, revert) "
        f"and written as active_server: NAME for {host.name} in "
        f"{host_files.located(Path(state.cwd or '.'), promote.PROMOTED_FILE)}; otherwise nothing changes"
    )
    lease, data = run_token(), config.data
    return {
        name: releases.switch_to(current, name, data.releases_kept, data.sglang_venvs_dir, lease)
        for name in names
        if name != active
    }
