"""The simulator's own machinery: processes, phases, simulated GPUs, HTTP, faults.

Everything under `sglang.sim` stands in for parts of SGLang (and of CUDA) that cannot run in
the lab; the public surface that mirrors SGLang lives in `sglang.launch_server` and
`sglang.srt`.
"""
