"""The lab's stand-in for Kimi-K2.5's configuration_kimi_k25.py (moonshotai/Kimi-K2.5 on the hub),
the module config.json's auto_map names for AutoConfig ("configuration_kimi_k25.KimiK25Config").

The real one subclasses transformers' PretrainedConfig; the simulator has no transformers, and
transformers' check_imports refuses a module whose imports are missing, so this one imports
nothing. It is real code all the same: SGLang (and the simulator, lab/sglang_sim/sglang/srt/remote_code.py)
runs it under --trust-remote-code, as the server's user (tests/lab/test_sandbox.py plants one that
says so).
"""


class KimiK25Config:
    model_type = "kimi_k25"
