"""`python3 -m sglang_pve.agent ...` (the zipapp's own __main__.py does the same)."""

from sglang_pve.agent.cli import main

raise SystemExit(main())
