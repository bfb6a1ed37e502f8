"""sglang-pve: deploy and operate SGLang LLM servers on Proxmox VE GPU hosts, with pyinfra.

Kept import-free: sglang_pve.agent ships to targets as a zipapp that includes this file."""
