"""Everything the preflight judges about a host, read in ONE remote command.

The command runs sglang_pve/agent/preflight_probe.py with the interpreter the units run the agent with
(contract.TARGET_PYTHON) (shipped inline, base64,
never installed); see that file for what it reads and for the spec it is given.
"""

import base64
import json
import shlex
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pyinfra.api import FactBase

from sglang_pve.agent import preflight_probe
from sglang_pve.agent.contract import TARGET_PYTHON
from sglang_pve.deploy.facts import batched
from sglang_pve.deploy.facts.host_basics import Basics, HostBasics

PROBE = Path(preflight_probe.__file__)
_BOOTSTRAP = "import base64, sys; exec(base64.b64decode(sys.argv[1]))"


@dataclass(frozen=True)
class RenderedConfig:
    path: str  # /etc/sglang/servers/<name>.yaml
    text: str  # what the deploy writes there
    sha1: str
    env: dict[str, str]  # the server's unit environment, which SGLang's parse also sees


@dataclass(frozen=True)
class ProbeSpec:
    """What to read: model dirs, rendered configs, ports; and whose configs SGLang judges."""

    models: tuple[str, ...]
    configs: dict[str, RenderedConfig]
    ports: tuple[int, ...]
    venv: str
    pinned: str  # the SGLang version the deploy pins
    judge_all: bool  # False: judge only configs that differ from the host's (or a different SGLang)
    timeout_s: int = 300
    # The judge's systemd-run: the server's identity and sandbox properties (sglang_pve/deploy/sandbox.py),
    # and its environment; without a non-root User the probe lets SGLang judge nothing.
    sandbox: tuple[tuple[str, str], ...] = ()
    judge_env: dict[str, str] = field(default_factory=dict)
    reach: tuple[tuple[str, int], ...] = ()  # (host, port) this host must reach: a TP rank's rank 0
    # property -> the systemd version that first knows it (sandbox.SINCE): the probe leaves out what
    # its host's systemd lacks, when the controller did not know that version (empty: it did)
    since: tuple[tuple[str, int], ...] = ()

    def encoded(self) -> str:
        spec = {
            "models": list(self.models),
            "ports": list(self.ports),
            "venv": self.venv,
            "pinned": self.pinned,
            "judge": "all" if self.judge_all else "changed",
            "timeout_s": self.timeout_s,
            "sandbox": [list(prop) for prop in self.sandbox],
            "judge_env": self.judge_env,
            "reach": [list(target) for target in self.reach],
            "configs": {name: asdict(config) for name, config in self.configs.items()},
            **({"since": dict(self.since)} if self.since else {}),
        }
        return base64.b64encode(json.dumps(spec).encode()).decode()

    def __str__(self) -> str:  # pyinfra logs fact arguments: keep the rendered texts out of it
        return f"{len(self.configs)} configs, {len(self.models)} model dirs, ports {list(self.ports)}"


@dataclass(frozen=True)
class ModelDir:
    is_dir: bool
    config: dict | None  # config.json, parsed
    error: str | None  # why config.json is unusable: "is missing", "is not valid JSON (...)"


@dataclass(frozen=True)
class Holder:
    pid: int
    comm: str
    cmdline: str
    unit: str | None  # SGLANG_PVE_UNIT from its environment: set by this toolkit's units only


@dataclass(frozen=True)
class Listener:
    port: int
    address: str
    holders: tuple[Holder, ...]


@dataclass(frozen=True)
class Verdict:
    ok: bool | None  # None: SGLang could not judge it (no parser, timeout, crash)
    error: str


@dataclass
class HostSnapshot:
    models: dict[str, ModelDir] = field(default_factory=dict)
    configs: dict[str, str | None] = field(default_factory=dict)  # name -> sha1 of the host's copy
    gpus: list[str] = field(default_factory=list)  # ["nvidia0", ...]
    listeners: list[Listener] = field(default_factory=list)
    limits: dict[str, tuple[int | None, int | None]] = field(default_factory=dict)  # (soft, hard), None = unlimited
    cap_sys_resource: bool = False  # in PID 1's CapEff
    init_userns: bool = True  # PID 1 in the initial user namespace (a privileged container)
    sglang: str | None = None  # version in the venv; None: no venv, "": venv without sglang
    verdicts: dict[str, Verdict] = field(default_factory=dict)  # only the configs SGLang judged
    python: tuple = ()  # (path, major, minor, micro) of contract.TARGET_PYTHON, which ran the probe
    reach: dict[str, str | None] = field(default_factory=dict)  # "host:port" -> None (reached) or why not
    error: str | None = None  # the probe itself failed


def parse_snapshot(document: dict) -> HostSnapshot:
    if "error" in document:
        return HostSnapshot(error=document["error"])
    return HostSnapshot(
        models={path: ModelDir(m["dir"], m["config"], m["error"]) for path, m in document["models"].items()},
        configs=document["configs"],
        gpus=document["gpus"],
        listeners=[
            Listener(x["port"], x["address"], tuple(Holder(**h) for h in x["holders"])) for x in document["listeners"]
        ],
        limits={name: tuple(values) for name, values in document["limits"].items()},
        cap_sys_resource=document["cap_sys_resource"],
        init_userns=document["init_userns"],
        sglang=document["sglang"],
        python=tuple(document.get("python", ())),
        reach=document.get("reach", {}),
        verdicts={name: Verdict(v["ok"], v["error"]) for name, v in document["verdicts"].items()},
    )


class PreflightProbe(FactBase["HostSnapshot | None"]):
    """Model configs, host copies of the server configs, GPUs, listeners, PID 1's limits, and
    SGLang's own verdict on the configs; None when the probe could not run.

    host.get_fact(PreflightProbe, spec=ProbeSpec(models=("/shared/models/Kimi-K2.5-INT4",), ...))
    # HostSnapshot(models={"/shared/models/Kimi-K2.5-INT4": ModelDir(True, {...}, None)},
    #              gpus=["nvidia0", ..., "nvidia7"], sglang="0.5.16.dev20260720+g8905cbd42", ...)
    """

    def requires_command(self, spec):
        return TARGET_PYTHON

    def command(self, spec):
        script = base64.b64encode(PROBE.read_bytes()).decode()
        return f"{TARGET_PYTHON} -c {shlex.quote(_BOOTSTRAP)} {script} {spec.encoded()}"

    def process(self, output):
        prefix = preflight_probe.RESULT_PREFIX
        lines = [line[len(prefix) :] for line in output if line.startswith(prefix)]
        if not lines:
            return HostSnapshot(error="the probe printed no result:\n" + "\n".join(output[-20:]))
        return parse_snapshot(json.loads(lines[-1]))


@dataclass(frozen=True)
class PreflightReading:
    basics: Basics  # HostBasics: what the rest of the deploy renders from (deploy/context.py)
    snapshot: "HostSnapshot | None"  # None: no TARGET_PYTHON on the host, the probe cannot run


class PreflightRead(FactBase[PreflightReading]):
    """HostBasics and PreflightProbe in one command: a deploy's first read of a container (its
    probe's spec needs nothing of the host: the probe leaves out the sandbox properties its host's
    systemd lacks, ProbeSpec.since).

    host.get_fact(PreflightRead, spec=ProbeSpec(...)).snapshot.sglang  # "0.5.16.dev20260720+g8905cbd42"
    """

    def command(self, spec):
        return batched.joined(
            [HostBasics().command(spec.venv), batched.requiring(TARGET_PYTHON, PreflightProbe().command(spec))]
        )

    def process(self, output):
        basics, probe = batched.split_last(output)  # HostBasics' own parts come first
        return PreflightReading(
            HostBasics().process(basics), None if probe is None else PreflightProbe().process(probe)
        )
