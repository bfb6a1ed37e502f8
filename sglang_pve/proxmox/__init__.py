"""The Proxmox VE side: the API client (auth, TLS pinning, task waiting, errors that name the
call), the container config wanted from a spec, and the pure diff against what the node has."""
