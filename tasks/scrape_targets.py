"""Prometheus scrape targets from the inventory:  pyinfra inventory/prod.py tasks/scrape_targets.py

Writes file_sd/<host>.json on the controller for file_sd_configs (node_exporter with the agent's
metrics, SGLang's /metrics, routers); changes no host. sglang_pve/deploys/scrape_targets.py."""

from sglang_pve.deploys.scrape_targets import scrape_targets

scrape_targets()
