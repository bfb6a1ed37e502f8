"""Preflight: every declared server configuration judged against the host before anything changes.

sglang_pve/deploys/preflight.py reads the host once (facts.preflight.PreflightProbe) and runs the pure rules:

    spec = probe_spec(deployment, venv, judge_all=True)
    report = check(deployment, spec, host.get_fact(PreflightProbe, spec=spec))
    report.problems[0].render("sglang1")
    # "sglang1: servers.eagle3-2step.context-length = 262144: the target runs at context length
    #  262144 (...) but the draft's derived context length is 131072 (...). Fix: cap it: ..."
    report.summary()
    # "4 server configs with canonical flags; 2 model dirs with config.json; drafts of 3 configs fit ..."
"""

from dataclasses import dataclass, field

from sglang_pve.agent import contract
from sglang_pve.config import Deployment, Problem, ServerConfig
from sglang_pve.deploy import paths, sandbox
from sglang_pve.deploy.facts.preflight import HostSnapshot, ProbeSpec, RenderedConfig
from sglang_pve.deploy.operations.files import ManagedFile
from sglang_pve.deploy.preflight.auth import auth_problems, client_warnings, user_warnings
from sglang_pve.deploy.preflight.context_length import context_problems
from sglang_pve.deploy.preflight.draft import eagle3_problems
from sglang_pve.deploy.preflight.flags import rendered_problems, verdict_problems
from sglang_pve.deploy.preflight.host import gpu_problems, gpus_needed, limit_problems, port, port_problems
from sglang_pve.deploy.preflight.models import model_config
from sglang_pve.deploy.preflight.tp_group import member_problems, reach_targets
from sglang_pve.deploy.render import server_yaml, tp_rank


@dataclass
class Report:
    problems: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)  # what passed, for the one-line summary

    def add(self, found: tuple[list[Problem], list[Problem]]) -> None:
        self.problems += found[0]
        self.warnings += found[1]

    def refusal(self, host: str) -> str:
        problems = merged(self.problems)
        lines = "\n".join(f"  - {p.render(host)}" for p in problems)
        return f"preflight refused {host} ({len(problems)} problem(s)); nothing was changed:\n{lines}"

    def summary(self) -> str:
        return "; ".join(self.checked)


def merged(problems: list[Problem]) -> list[Problem]:
    """One line for a problem several servers share (three configs, one draft), keyed
    servers.{eagle3-2step,eagle3-3step}.speculative-draft-model-path."""
    groups: dict[tuple, tuple[Problem, list[str]]] = {}
    for problem in problems:
        kind, _, rest = problem.key.partition(".")
        server, _, flag = rest.partition(".")
        shared = (flag, repr(problem.value), problem.message, problem.fix) if kind == "servers" else (id(problem),)
        groups.setdefault(shared, (problem, []))[1].append(server)
    result = []
    for problem, servers in groups.values():
        if len(servers) > 1:
            tail = problem.key.split(".", 2)[2:]  # the flag, if any
            problem = Problem(
                ".".join(["servers", "{" + ",".join(servers) + "}", *tail]), problem.value, problem.message, problem.fix
            )
        result.append(problem)
    return result


def probe_spec(deployment: Deployment, venv: str, judge_all: bool, systemd: int | None = None) -> ProbeSpec:
    """What the probe reads for this deployment; judge_all=False lets SGLang's parser judge only
    configs that differ from the host's copy (or every one, when the venv holds another version);
    `systemd`: the host's version (the UnitHostInfo fact), whose systemd-run refuses a newer property;
    None (not read before the probe): every property, each with the version that first knows it, and
    the probe leaves out what its host's systemd lacks."""
    configs = {}
    for name, server in deployment.servers.items():
        text = server_yaml(server, tp=tp_rank(deployment, server))
        rendered = ManagedFile(paths.server_config_path(name), text)
        configs[name] = RenderedConfig(rendered.path, text, rendered.sha1, dict(server.env))
    servers = deployment.servers.values()
    models = dict.fromkeys(p for s in servers for p in (s.args.model_path, s.args.speculative_draft_model_path) if p)
    tp = deployment.tp
    ports = {port(s) for s in servers} | ({tp.dist_init_port} if tp is not None and tp.rank == 0 else set())
    return ProbeSpec(
        tuple(models),
        configs,
        tuple(sorted(ports)),
        venv,
        deployment.sglang_version,
        judge_all,
        sandbox=judge_sandbox(deployment, systemd),
        judge_env=paths.server_home_env(state=JUDGE_HOME, cache=f"{JUDGE_HOME}/cache"),
        reach=reach_targets(tp),
        since=tuple(sandbox.SINCE.items()) if systemd is None else (),
    )


# The judge's home and caches (transformers copies a model's remote code under HF_HOME/modules): in its
# private /tmp, gone when it exits, so a preflight (also under --dry) leaves nothing on the host.
JUDGE_HOME = "/tmp/sglang-pve-judge"


def judge_sandbox(deployment: Deployment, systemd: int | None = None) -> tuple[tuple[str, str], ...]:
    """The server unit's identity and sandbox for SGLang's parse; a root server's judge still runs as
    a dynamic user (nothing read from a model folder runs as root at preflight)."""
    data = deployment.data
    user = data.server_user if data.server_user != "root" else sandbox.JUDGE_USER
    return (*sandbox.identity(user, data.server_groups), *sandbox.for_systemd(systemd))  # IPAddressDeny=any: no net


def server_problems(
    server: ServerConfig, spec: ProbeSpec, snapshot: HostSnapshot, pinned: str
) -> tuple[list[Problem], list[Problem]]:
    """(problems, warnings) of one server configuration."""
    name, args = server.name, server.args
    problems, warnings = rendered_problems(name, spec.configs[name].text), []
    target, model_problems = model_config(
        f"servers.{name}.model-path", args.model_path, snapshot.models[args.model_path]
    )
    draft_path, draft = args.speculative_draft_model_path, None
    if draft_path:
        draft, found = model_config(
            f"servers.{name}.speculative-draft-model-path", draft_path, snapshot.models[draft_path]
        )
        model_problems += found
    problems += model_problems
    # SGLang's parse reads the model's config too: with a model problem said above, its verdict
    # (a Hub ID: a connection error from the judge's sandbox) only repeats it, less clearly
    models_read = not model_problems
    for found_problems, found_warnings in (
        context_problems(server, target, draft) if target is not None else ([], []),
        eagle3_problems(name, draft_path, target, draft, pinned)
        if draft_path and target is not None and draft is not None and args.speculative_algorithm == "EAGLE3"
        else ([], []),
        verdict_problems(name, spec.configs[name].path, snapshot.verdicts[name], snapshot.sglang, pinned)
        if models_read and name in snapshot.verdicts and snapshot.sglang is not None  # with an installed SGLang
        else ([], []),
    ):
        problems += found_problems
        warnings += found_warnings
    return problems, warnings


def check(deployment: Deployment, spec: ProbeSpec, snapshot: HostSnapshot) -> Report:
    """Every rule over the deployment and what the probe read; all problems at once."""
    report = Report()
    if snapshot.error:
        report.problems.append(
            Problem(
                "preflight",
                None,
                f"the probe failed on the host: {snapshot.error}",
                "fix what the traceback shows (the host needs python3 and /proc)",
            )
        )
        return report
    report.problems += python_problems(snapshot.python)
    servers, pinned = deployment.servers, deployment.sglang_version
    for server in servers.values():
        report.add(server_problems(server, spec, snapshot, pinned))
    if runs_server(deployment):  # a host that starts no server (a router's) needs no GPU
        report.problems += gpu_problems(servers, snapshot.gpus, deployment.tp)
    report.problems += port_problems(servers, snapshot.listeners)
    report.problems += limit_problems(deployment.data.unit_limits, snapshot)
    if deployment.tp is not None:
        report.problems += member_problems(deployment.tp, snapshot)
    report.add(auth_problems(deployment))
    report.warnings += user_warnings(deployment) + client_warnings(deployment)
    report.checked = _checked(deployment, spec, snapshot)
    return report


def runs_server(deployment: Deployment) -> bool:
    """Whether the host starts an SGLang server (its active_server; a TP member names its group's):
    the GPU and driver rules judge only such a host; a switch to a server judges it again."""
    return deployment.data.active_server is not None


def python_problems(python: tuple) -> list[Problem]:
    """The agent (a zipapp every unit runs with contract.TARGET_PYTHON) needs MIN_PYTHON."""
    path, version = (python[0], tuple(python[1:])) if python else (contract.TARGET_PYTHON, ())
    if version >= contract.MIN_PYTHON:
        return []
    wanted = ".".join(map(str, contract.MIN_PYTHON))
    return [
        Problem(
            "python",
            f"{path} {'.'.join(map(str, version)) or 'unknown'}",
            f"the lifecycle agent needs Python >= {wanted} at {contract.TARGET_PYTHON}",
            f"install python3 >= {wanted} as {contract.TARGET_PYTHON} (Debian 12 and Ubuntu 24.04 ship it)",
        )
    ]


def _port_line(number: int, snapshot: HostSnapshot) -> str:
    units = sorted({h.unit for x in snapshot.listeners if x.port == number for h in x.holders if h.unit})
    return f"port {number} " + (f"held by {', '.join(units)}" if units else "free")


def _checked(deployment: Deployment, spec: ProbeSpec, snapshot: HostSnapshot) -> list[str]:
    servers = deployment.servers.values()
    drafts = sum(1 for s in servers if s.args.speculative_draft_model_path)
    if snapshot.cap_sys_resource and snapshot.init_userns:
        limits = "unit limits: PID 1 may raise its hard limits"
    else:
        limits = (
            "unit limits within PID 1's hard limits ("
            + ", ".join(
                f"{name} {value} <= {snapshot.limits[name][1] or 'unlimited'}"
                for name, value in deployment.data.unit_limits.model_dump().items()
                if name in snapshot.limits
            )
            + ")"
        )
    if not snapshot.sglang:
        parser = f"SGLang not installed in {spec.venv} yet: its parser judges the configs once it is"
    elif not snapshot.verdicts:
        parser = f"SGLang {snapshot.sglang}: no config changed, none re-judged"
    else:
        accepted = sum(1 for v in snapshot.verdicts.values() if v.ok)
        parser = f"SGLang {snapshot.sglang}'s parser accepts {accepted} of {len(snapshot.verdicts)} judged configs" + (
            "" if len(snapshot.verdicts) == len(spec.configs) else " (the changed ones)"
        )
    return [
        f"Python {'.'.join(map(str, snapshot.python[1:]))} at {snapshot.python[0]} runs the agent"
        if snapshot.python
        else "Python unknown",
        f"{len(spec.configs)} server configs with canonical flags",
        f"{len(spec.models)} model dirs with config.json",
        f"drafts of {drafts} configs fit their targets (architecture, sizes, aux layers, context length)",
        f"{len(snapshot.gpus)} GPUs >= {max(gpus_needed(s, deployment.tp) for s in servers)} needed"
        if runs_server(deployment)
        else f"{len(snapshot.gpus)} GPUs: none needed (no active_server)",
        *(_port_line(number, snapshot) for number in spec.ports),
        limits,
        parser,
    ]
