"""Fault injection: a JSON file, re-read on every request, with a list of rules. The first rule
whose ``method`` (optional) and ``path`` (fnmatch pattern on the path after /api2/json) match
applies; ``times`` (optional) limits how often a rule fires (counted per emulator).

    [{"method": "POST", "path": "/nodes/*/lxc/*/status/start", "task_error": "startup failed"},
     {"method": "PUT", "path": "/nodes/*/lxc/*/config", "http_status": 500,
      "message": "got timeout", "times": 1},
     {"path": "/nodes/*/lxc/*/config", "delay_s": 10},
     {"path": "/cluster/nextid", "drop": true}]

Effects: ``delay_s`` sleeps before answering (client timeouts); ``drop`` closes the connection
without an answer; ``http_status`` (+ ``message``) answers that error instead of running the
handler; ``task_error`` lets the handler answer a UPID, then ends the task with that exit status
before it changes anything.
"""

import fnmatch
import json
import threading


class Faults:
    def __init__(self, path_file):
        self.path_file = path_file
        self._fired: dict[str, int] = {}
        self._lock = threading.Lock()

    def match(self, method: str, path: str) -> dict | None:
        """The rule that applies to this request (counted as fired), or None."""
        if not self.path_file:
            return None
        return _first(self.path_file, method, path, self._fired, self._lock)


def _first(path_file, method, path, fired, lock) -> dict | None:
    try:
        with open(path_file, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return None
    rules = json.loads(text) if text.strip() else []
    for rule in rules:
        if rule.get("method", method).upper() != method:
            continue
        if not fnmatch.fnmatchcase(path, rule.get("path", "*")):
            continue
        key = json.dumps(rule, sort_keys=True)
        with lock:
            if "times" in rule and fired.get(key, 0) >= int(rule["times"]):
                continue
            fired[key] = fired.get(key, 0) + 1
        return rule
    return None
