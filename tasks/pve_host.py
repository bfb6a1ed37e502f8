"""Proxmox node preparation (group pve_nodes):  pyinfra inventory/prod.py tasks/pve_host.py

sglang_pve/deploys/node_prep.py says what it does."""

from sglang_pve.deploys.node_prep import prepare_node

prepare_node()
