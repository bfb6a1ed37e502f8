"""`--config FILE`: turn a YAML file of flag names into argv, the way SGLang's merger does.

The YAML's items become `--key value` words placed *before* the command line's own words, so
argparse's last-one-wins gives CLI > YAML > defaults. A `store_true` flag is written `key: true`
(`false` drops it). Keys that argparse does not know are rejected by argparse itself
("unrecognized arguments"), and keys whose action is neither `store` nor `store_true` (the
deprecated aliases) are rejected here, as in SGLang's `ConfigArgumentMerger`.
"""

import argparse
import logging
from pathlib import Path
from typing import Any, Dict, List, Optional

import yaml

logger = logging.getLogger(__name__)


class ConfigArgumentMerger:
    """Merge the arguments of a YAML config file into a command line."""

    def __init__(self, parser: argparse.ArgumentParser):
        self.store_true_actions = {a.dest for a in parser._actions if isinstance(a, argparse._StoreTrueAction)}
        self.unsupported_actions = {
            a.dest: a
            for a in parser._actions
            if a.option_strings
            and not isinstance(a, (argparse._StoreTrueAction, argparse._StoreAction))
            and "--config" not in a.option_strings
            and "--help" not in a.option_strings
        }

    def merge_config_with_args(self, cli_args: List[str]) -> List[str]:
        """Return `cli_args` with `--config FILE` replaced by the file's arguments, in front."""
        config_file_path = self._extract_config_file_path(cli_args)
        if not config_file_path:
            return cli_args
        config_args = self._convert_config_to_args(self._parse_yaml_config(config_file_path))
        config_index = cli_args.index("--config")
        return config_args + cli_args[:config_index] + cli_args[config_index + 2 :]

    @staticmethod
    def _extract_config_file_path(args: List[str]) -> Optional[str]:
        config_indices = [i for i, arg in enumerate(args) if arg == "--config"]
        if len(config_indices) > 1:
            raise ValueError("Multiple config files specified! Only one allowed.")
        if not config_indices:
            return None
        if config_indices[0] == len(args) - 1:
            raise ValueError("No config file specified after --config flag!")
        return args[config_indices[0] + 1]

    @staticmethod
    def _parse_yaml_config(file_path: str) -> Dict[str, Any]:
        path = Path(file_path)
        if path.suffix.lower() not in (".yaml", ".yml"):
            raise ValueError(f"Config file must be YAML format, got: {path.suffix}")
        if not path.exists():
            raise ValueError(f"Config file not found: {file_path}")
        try:
            with path.open() as f:
                config_data = yaml.safe_load(f)
        except Exception as e:
            logger.error(f"Failed to read config file {file_path}: {e}")
            raise
        if config_data is None:
            return {}
        if not isinstance(config_data, dict):
            raise ValueError("Config file must contain a dictionary at root level")
        return config_data

    def _convert_config_to_args(self, config: Dict[str, Any]) -> List[str]:
        args: List[str] = []
        for key, value in config.items():
            # Keys may be written with '-' or '_'; argparse only knows the dashed spelling.
            flag = f"--{str(key).replace('_', '-')}"
            key_norm = str(key).replace("-", "_")
            if key_norm in self.unsupported_actions:
                action = self.unsupported_actions[key_norm]
                raise ValueError(f"Unsupported config option '{key_norm}' with action '{action.__class__.__name__}'")
            if isinstance(value, bool):
                if key_norm in self.store_true_actions:
                    if value:
                        args.append(flag)
                else:
                    args.extend([flag, str(value).lower()])
            elif isinstance(value, list):
                if value:
                    args.append(flag)
                    args.extend(str(item) for item in value)
            else:
                args.extend([flag, str(value)])
        return args
