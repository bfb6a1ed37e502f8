"""A Proxmox VE API emulator for the lab's node pve1: the real API schema (read at run time from
../shared/reference), PVE's auth, config files, tasks and the rules the schema does not carry.

Stdlib only, relative imports only: it runs inside pve1 on Debian 12's python3 as a copied package
or a zipapp, and in-process in unit tests. See lab/pve/README.md.
"""
