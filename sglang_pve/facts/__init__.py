"""Custom pyinfra facts: each reads many things in ONE remote command (pyinfra 3 has no fact cache)."""
