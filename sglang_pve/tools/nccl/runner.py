"""One NCCL probe on one host (the python.call of tasks/nccl_probe.py, at execution time).

Uploads allreduce_probe.py and the candidate profiles, runs it with the python of SGLang's venv
(its torch and NCCL are what the servers use; its progress lines stream back live), reads the
result back, keeps it on the controller, prints the report (analysis.py) and, when asked and a
profile won overall outside the noise, writes it as the host's nccl_profile (measured.py).
"""

import json
import time
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path

from pyinfra import logger
from pyinfra.api import StringCommand
from pyinfra.api.exceptions import PyinfraError

from sglang_pve.agent import allreduce_probe
from sglang_pve.config.safe import printable, printable_tree
from sglang_pve.deploy import paths
from sglang_pve.tools.nccl import analysis, measured

REMOTE_DIR = f"{paths.STATE_DIR}/nccl-probe"


@dataclass(frozen=True)
class ProbeJob:
    python: str  # the venv's interpreter
    profiles: dict  # name -> {NCCL_VAR: value}
    rounds: int
    trials: int
    iters: int
    timeout_s: float
    max_bytes: int
    mix: dict
    write: bool
    results_dir: Path
    project_dir: Path


def run(job: ProbeJob) -> None:
    from pyinfra import host

    ok, output = host.run_shell_command(StringCommand(job.python, "-c", "import torch"), print_output=False)
    if not ok:
        raise PyinfraError(
            f"{host.name}: the NCCL probe needs torch in SGLang's venv, and `{job.python} -c "
            f"'import torch'` failed: {printable(output.stderr.strip()[-300:])}. Fix: deploy SGLang first "
            "(pyinfra ... deploy.py); the lab's simulator venv has no torch, so there the probe "
            "runs on the controller with gloo (tests/unit/test_nccl_probe.py)"
        )
    script, profiles, result = (f"{REMOTE_DIR}/{name}" for name in ("nccl-probe.py", "profiles.json", "result.json"))
    host.run_shell_command(StringCommand("mkdir", "-p", "-m", "700", REMOTE_DIR), print_output=False)
    host.put_file(BytesIO(Path(allreduce_probe.__file__).read_bytes()), script, print_output=False)
    host.put_file(BytesIO(json.dumps(job.profiles).encode()), profiles, print_output=False)
    _, said = host.run_shell_command(  # the probe's lines quote NCCL and the host: shown escaped
        StringCommand(
            job.python,
            script,
            "--profiles",
            profiles,
            "--out",
            result,
            "--rounds",
            str(job.rounds),
            "--trials",
            str(job.trials),
            "--iters",
            str(job.iters),
            "--timeout",
            str(job.timeout_s),
            "--max-bytes",
            str(job.max_bytes),
        ),
        print_output=False,
    )
    for line in said.output_lines:
        logger.info(f"{host.print_prefix}  {printable(line)}")
    ok, output = host.run_shell_command(StringCommand("cat", result), print_output=False)
    if not ok:
        raise PyinfraError(f"{host.name}: the NCCL probe left no result in {result} (its output is above)")
    data = json.loads(output.stdout)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    job.results_dir.mkdir(parents=True, exist_ok=True)
    saved = job.results_dir / f"nccl-probe-{stamp}-{host.name}.json"
    saved.write_text(json.dumps(data, indent=1), encoding="utf-8")
    report = analysis.render(printable_tree(data), job.mix)  # type: ignore[arg-type]  # the probe's strings are the host's
    (saved.with_suffix(".txt")).write_text(report + "\n", encoding="utf-8")
    logger.info(f"{report}\nraw result: {saved}")
    overall = analysis.analyse(printable_tree(data), job.mix)["overall"]  # type: ignore[arg-type]
    if job.write and overall.winner:
        path = measured.write(
            job.project_dir,
            host.name,
            overall.winner,
            time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            f"overall {overall.describe()}",
        )
        logger.info(f"{host.print_prefix}nccl_profile {overall.winner} written to {path} for the next deploy")
    elif job.write:
        logger.warning(f"{host.print_prefix}nothing written: {overall.describe()}")
