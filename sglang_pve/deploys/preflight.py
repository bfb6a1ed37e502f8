"""Preflight: judge every server configuration against the host, before anything changes.

One remote command reads the host (sglang_pve.deploy.facts.preflight PreflightRead: the probe and
the host's basics the rest of the deploy renders from); the rules are pure
(sglang_pve.deploy.preflight). A problem stops the whole run here, at load time, before any operation;
warnings are logged and the run goes on.
"""

from pyinfra import host, logger
from pyinfra.api import deploy
from pyinfra.api.exceptions import PyinfraError

from sglang_pve.deploy.context import basics, deployment, known_basics, unit_host, venv
from sglang_pve.deploy.facts.preflight import PreflightRead
from sglang_pve.deploy.preflight import check, probe_spec, runs_server
from sglang_pve.deploy.preflight.auth import ip_filter_warnings
from sglang_pve.deploy.preflight.driver import driver_problems
from sglang_pve.deploy.preflight.host import with_given_gpus
from sglang_pve.deploy.preflight.tp_group import RankFacts, disagreement, rank_facts
from sglang_pve.provision.roles import given_gpus, is_node, node_driver

# TP group members' facts by group, as their probes come in this run: pyinfra prepares every host's
# operations before it runs any, so the last member's refusal still comes before any change.
_ranks: dict[str, dict[str, RankFacts]] = {}


@deploy("Preflight")
def preflight(judge_all: bool = False) -> None:
    """A container's task. judge_all: SGLang's own parser judges every configuration (as
    tasks/preflight.py does), not only those the deploy would change; and the summary is logged."""
    if is_node():
        return
    config = deployment()
    # the host's systemd is not known yet: the probe leaves out the judge's properties it lacks
    spec = probe_spec(config, venv(), judge_all=judge_all)
    read = host.get_fact(PreflightRead, spec=spec)  # the host's basics and the probe: one command
    known_basics(read.basics)
    snapshot = read.snapshot
    if snapshot is None:
        raise PyinfraError(f"preflight cannot run on {host.name}: it has no python3 (install it first)")

    snapshot, judged = with_given_gpus(snapshot, given_gpus())  # a GPU-set change: judged as it will be
    if judged:
        logger.info(f"{host.print_prefix}preflight: {judged}")
    report = check(config, spec, snapshot)
    report.warnings += ip_filter_warnings(unit_host())
    facts = rank_facts(host.name, config, snapshot)
    if facts is not None and config.tp is not None:  # a TP group member: against the members read before it
        group = _ranks.setdefault(config.tp.group, {})
        report.problems += disagreement(config.tp, facts, [f for f in group.values() if f.host != host.name])
        group[host.name] = facts
    node = node_driver() if runs_server(config) else None  # a host that runs no server needs no driver
    if node is not None:  # a container provisioned by the toolkit, its node in this run
        report.problems += driver_problems(node[0], node[1], basics().driver)
    for warning in report.warnings:
        logger.warning(f"{host.print_prefix}preflight warning: {warning.render(host.name)}")
    if report.problems:
        raise PyinfraError(report.refusal(host.name))
    if judge_all:
        logger.info(f"{host.print_prefix}preflight passed: {report.summary()}")
