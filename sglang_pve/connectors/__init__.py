"""pyinfra connectors of the toolkit (registered as entry points in pyproject.toml)."""
