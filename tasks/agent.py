"""The lifecycle agent and the server logs' rotation:  pyinfra inventory/prod.py tasks/agent.py

sglang_pve/deploys/agent.py says what it does."""

from sglang_pve.deploys.agent import agent

agent()
