"""A model folder's remote code, loaded the way transformers does under trust_remote_code.

SGLang reads a model's config through transformers: ServerArgs' model-specific adjustments build a
ModelConfig (python/sglang/srt/configs/model_config.py, ModelConfig.__init__), which calls
get_config(model_path, trust_remote_code=...) (python/sglang/srt/utils/hf_transformers_utils.py,
get_config, sgl-project/sglang at 002fc100dccc4b8addd8ece3f7d4c7c180f6f50d), which calls
AutoConfig.from_pretrained(model, trust_remote_code=...). In transformers
(huggingface/transformers, src/transformers/models/auto/configuration_auto.py,
AutoConfig.from_pretrained, at 001002320fa01a489bb9b93976a7e4cd1a46291c):

    has_remote_code = "auto_map" in config_dict and "AutoConfig" in config_dict["auto_map"]
    if has_remote_code and trust_remote_code:
        config_class = get_class_from_dynamic_module(class_ref, pretrained_model_name_or_path, ...)

and get_class_from_dynamic_module (src/transformers/dynamic_module_utils.py, at
0131ec4b0f99ddb49b22af8bd2e09abde733e106: get_cached_module_file, check_imports,
create_dynamic_module, get_class_in_module) splits "configuration_kimi_k25.KimiK25Config" into the
module file and the class, checks that every top-level import of the file can be imported (an
ImportError naming the missing packages otherwise), copies the file (and the files it imports
relatively) from a local model folder into HF_MODULES_CACHE/transformers_modules/<folder name>/
(HF_MODULES_CACHE: $HF_MODULES_CACHE, else $HF_HOME/modules, else
$XDG_CACHE_HOME/huggingface/modules, else ~/.cache/huggingface/modules; utils/hub.py), with
__init__.py files, and imports it: the module's top-level code runs, as the process's user.

Here, as there: a config.json whose auto_map names an AutoConfig runs that file when
--trust-remote-code is set, and a missing file fails with transformers' OSError. Not simulated:
hub downloads (the lab's models are local folders) and the config class's own from_pretrained (the
simulator keeps config.json's dict). The folder's name is sanitized as later transformers releases
do (dynamic_module_utils.py, _sanitize_module_name: "." -> "_dot_", "-" -> "_hyphen_", a leading
digit gets "_"; read in a snapshot whose commit the index did not name), or a folder named
Kimi-K2.5-INT4 could not be imported. Guess: without --trust-remote-code SGLang's own registered
config class serves kimi_k25 (sglang.srt.configs), so the file is not run.
"""

import filecmp
import importlib
import os
import re
import shutil
import sys
from pathlib import Path

TRANSFORMERS_DYNAMIC_MODULE_NAME = "transformers_modules"


def modules_cache() -> Path:
    """transformers' HF_MODULES_CACHE (src/transformers/utils/hub.py)."""
    if os.environ.get("HF_MODULES_CACHE"):
        return Path(os.environ["HF_MODULES_CACHE"])
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]) / "modules"
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(xdg) / "huggingface" / "modules"


def sanitize_module_name(name: str) -> str:
    sanitized = name.replace(".", "_dot_").replace("-", "_hyphen_")
    return f"_{sanitized}" if sanitized[:1].isdigit() else sanitized


def get_relative_imports(module_file: Path) -> list[str]:
    content = module_file.read_text(encoding="utf-8")
    found = re.findall(r"^\s*import\s+\.(\S+)\s*$", content, flags=re.MULTILINE)
    found += re.findall(r"^\s*from\s+\.(\S+)\s+import", content, flags=re.MULTILINE)
    return sorted(set(found))


def check_imports(module_file: Path) -> list[str]:
    """transformers' check_imports: every top-level import must exist; returns the relative ones."""
    content = module_file.read_text(encoding="utf-8")
    content = re.sub(r"\s*try\s*:\s*.*?\s*except\s*:", "", content, flags=re.MULTILINE)
    imports = re.findall(r"^\s*import\s+(\S+)\s*$", content, flags=re.MULTILINE)
    imports += re.findall(r"^\s*from\s+(\S+)\s+import", content, flags=re.MULTILINE)
    missing = []
    for name in sorted({imp.split(".")[0] for imp in imports if not imp.startswith(".")}):
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise ImportError(
            "This modeling file requires the following packages that were not found in your environment: "
            f"{', '.join(missing)}. Run `pip install {' '.join(missing)}`"
        )
    return get_relative_imports(module_file)


def create_dynamic_module(cache: Path, name: str) -> Path:
    """The package directories (with __init__.py) under the modules cache."""
    path = cache
    for part in (TRANSFORMERS_DYNAMIC_MODULE_NAME, *Path(name).parts):
        path = path / part
        path.mkdir(parents=True, exist_ok=True)
        (path / "__init__.py").touch()
    if str(cache) not in sys.path:
        sys.path.append(str(cache))
    return path


def get_class_from_dynamic_module(class_ref: str, model_path: str):
    """The class `class_ref` ("configuration_kimi_k25.KimiK25Config") from the local model folder."""
    module_name, class_name = class_ref.split(".")
    module_file = f"{module_name}.py"
    resolved = Path(model_path) / module_file
    if not resolved.is_file():  # cached_file's wording for a local folder (utils/hub.py; revision: a guess)
        raise OSError(
            f"{model_path} does not appear to have a file named {module_file}. Checkout "
            f"'https://huggingface.co/{model_path}/tree/None' for available files."
        )
    needed = check_imports(resolved)
    submodule = sanitize_module_name(os.path.basename(os.path.normpath(model_path)))
    target = create_dynamic_module(modules_cache(), submodule)
    for name in (module_file, *(f"{m}.py" for m in needed)):
        source = Path(model_path) / name
        if not (target / name).exists() or not filecmp.cmp(source, target / name):
            shutil.copy(source, target / name)
    importlib.invalidate_caches()
    # get_class_in_module: the model folder's code runs here, once per process
    module = importlib.import_module(f"{TRANSFORMERS_DYNAMIC_MODULE_NAME}.{submodule}.{module_name}")
    return getattr(module, class_name)


def load_remote_config_class(config: dict, model_path: str, trust_remote_code: bool):
    """AutoConfig.from_pretrained's auto_map step: the remote config class, or None (not asked for)."""
    auto_map = config.get("auto_map") or {}
    if "AutoConfig" not in auto_map or not trust_remote_code:
        return None
    return get_class_from_dynamic_module(auto_map["AutoConfig"], model_path)
