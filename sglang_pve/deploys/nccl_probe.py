"""Which NCCL profile is fastest on this host. Options (host data or --data):

    profiles=pcie-tuned,nccl-defaults   candidates (default: every profile in nccl_profiles)
    rounds=3 trials=7 iters=20 probe_timeout_s=180 max_bytes=67108864
    write=1                             the overall winner becomes this host's nccl_profile
                                        (group_data/nccl_measured.yml, read by the inventories)

All-reduce latency and bus bandwidth over all GPUs, at decode sizes (7168 x bf16 x batch 1..64)
and prefill sizes (1..64 MiB), fresh process groups per profile (rounds, interleaved), CUDA-graph-timed trials
(sglang_pve/agent/allreduce_probe.py); the best profile per regime and overall for the host's
`nccl_workload_mix`, named only outside the noise (sglang_pve/tools/nccl/analysis.py). Stop the
server first: the probe needs the GPUs' memory. `--dry` changes nothing.
"""

from pathlib import Path

from pyinfra import state
from pyinfra.api import deploy
from pyinfra.operations import python

from sglang_pve.config.bench import probe_options
from sglang_pve.deploy.context import deployment, task_options, venv
from sglang_pve.provision.roles import is_node
from sglang_pve.tools.nccl import runner


@deploy("NCCL probe")
def nccl_probe() -> None:
    """A container's task; Proxmox nodes are skipped."""
    if is_node():
        return
    config = deployment()
    options = task_options(probe_options)
    names = options.profiles or list(config.data.nccl_profiles)
    project = Path(state.cwd or ".")

    python.call(
        name=f"NCCL all-reduce probe: {', '.join(names)}",
        function=runner.run,
        job=runner.ProbeJob(
            python=f"{venv()}/bin/python",
            profiles={name: config.data.nccl_profiles[name] for name in names},
            rounds=options.rounds,
            trials=options.trials,
            iters=options.iters,
            timeout_s=options.probe_timeout_s,
            max_bytes=options.max_bytes,
            mix=options.nccl_workload_mix,
            write=options.write,
            results_dir=project / "bench-results",
            project_dir=project,
        ),
    )
