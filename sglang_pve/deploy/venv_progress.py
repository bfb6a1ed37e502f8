"""Live progress of a venv build (issue 18, deliver 4): resolving and installing torch-sized wheels
takes minutes, and the installer ran with --quiet. Now it writes its progress to a root-only log
beside the build (operations/venvs.py), and while the step runs (deploy/progress.py's FollowedCommand)
the lines it knows are read from that log every INTERVAL_S and summed up in one line:

    [gpu1] progress: venv sglang 0.5.9 installing 95 s: fetching 12 of 180 (in flight: torch 846.3MiB)

Lines known (uv 0.13.9, the pinned one, `-v` and its plain output, as seen with the lab's index;
pip's plain output): uv `DEBUG Selecting: NAME==VERSION [compatible] (FILE)`, `DEBUG Identified
uncached distribution: NAME==VERSION`, `DEBUG Sending fresh GET request for: URL`, `Resolved N
packages in T`, `Downloading NAME (SIZE)`, ` Downloaded NAME`, `Prepared N packages in T`,
`Installed N packages in T`; pip `Collecting REQ`, `  Downloading FILE_OR_URL (SIZE)`, `Installing
collected packages: ...`, `Successfully installed ...`, `Would install ...`.

No URL is ever shown: an index URL can carry credentials (config/indexes.py refuses them in the
URL, the logins go through NETRC=, but a proxy's or a redirect's could): of a URL only its file
name is kept, and every name shown must match NAME_TEXT (package names, versions, file names).
"""

import re
import shlex
from urllib.parse import urlsplit

from sglang_pve.deploy.progress import Watch

NAME_TEXT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+!=<>~-]{0,199}")
_UV_SELECTING = re.compile(r"^DEBUG Selecting: (\S+)")
_UV_UNCACHED = re.compile(r"^DEBUG Identified uncached distribution: (\S+)")
_UV_GET = re.compile(r"^DEBUG Sending fresh GET request for: (\S+)")
_UV_DOWNLOADING = re.compile(r"^Downloading (\S+) \(([0-9.]+[KMGT]?i?B)\)$")
_UV_DOWNLOADED = re.compile(r"^ Downloaded (\S+)$")
_DONE = re.compile(r"^(Resolved|Prepared|Installed) (\d+) packages? in ")
_PIP_COLLECTING = re.compile(r"^Collecting (\S+)")
_PIP_DOWNLOADING = re.compile(r"^  Downloading (\S+)(?: \(([0-9.]+ [kMGT]?B)\))?")
_PIP_INSTALLING = re.compile(r"^Installing collected packages: (.*)$")
_PIP_END = re.compile(r"^(Successfully installed|Would install) ")
# what the host sends of the log: the lines above only (grep -E, POSIX ERE: no \S, \d)
HOST_PATTERN = (
    "^DEBUG (Selecting|Identified uncached distribution|Sending fresh GET request for): "
    "|^(Resolved|Prepared|Installed) [0-9]+ package|^ ?Download(ing|ed) |^Collecting "
    "|^  Downloading |^Installing collected packages: |^(Successfully installed|Would install) "
)


def shown(text: str) -> str:
    """A package, version or file name as shown: of a URL its last path segment only; '?' for anything
    that is not a plain name (so neither credentials nor control codes reach the terminal)."""
    if "://" in text:
        text = urlsplit(text).path.rsplit("/", 1)[-1]
    return text if NAME_TEXT.fullmatch(text) else "?"


def _wheel(url: str) -> bool:
    return "://" in url and urlsplit(url).path.endswith((".whl", ".tar.gz", ".zip"))


def summary(lines: list[str]) -> str:
    """What the installer is doing, from the known lines of its log (oldest first)."""
    selected, uncached, fetched, collected, downloads = [], [], 0, [], []
    in_flight: dict[str, str] = {}
    done: dict[str, int] = {}
    installing: list[str] = []
    ended = False
    for text in lines:
        if match := _UV_SELECTING.match(text):
            selected.append(match.group(1))
        elif match := _UV_UNCACHED.match(text):
            uncached.append(match.group(1))
        elif match := _UV_GET.match(text):
            fetched += bool(uncached) and _wheel(match.group(1))  # before: the resolver's metadata reads
        elif match := _UV_DOWNLOADING.match(text):
            in_flight[match.group(1)] = match.group(2)
        elif match := _UV_DOWNLOADED.match(text):
            in_flight.pop(match.group(1), None)
        elif match := _DONE.match(text):
            done[match.group(1)] = int(match.group(2))
        elif match := _PIP_COLLECTING.match(text):
            collected.append(match.group(1))
        elif match := _PIP_DOWNLOADING.match(text):
            downloads.append((match.group(1), match.group(2)))
        elif match := _PIP_INSTALLING.match(text):
            installing = [name for name in match.group(1).split(", ") if name]
        elif _PIP_END.match(text):
            ended = True
    if "Installed" in done:
        return f"installed {done['Installed']} packages"
    if "Prepared" in done:
        return f"{done['Prepared']} packages fetched, installing them into the venv"
    if uncached or in_flight:
        flying = ", ".join(f"{shown(name)} {size}" for name, size in list(in_flight.items())[-3:])
        count = f"fetching {min(fetched, len(uncached))} of {len(uncached)}" if uncached else "fetching"
        return count + (f" (in flight: {flying})" if flying else "")
    if "Resolved" in done:
        return f"resolved {done['Resolved']} packages"
    if selected:
        return f"{len(selected)} packages selected, latest {shown(selected[-1])}"
    if ended:
        return "done"
    if installing:
        return f"installing {len(installing)} packages into the venv"
    if downloads:
        name, size = downloads[-1]
        return f"{len(collected)} collected, downloading {shown(name)}" + (f" ({size})" if size else "")
    if collected:
        return f"{len(collected)} collected, latest {shown(collected[-1])}"
    return "started, nothing to report yet"


def line(label: str, stage: str, lines: list[str], seconds: float) -> str:
    return f"progress: venv {label} {stage} {seconds:.0f} s: {summary(lines)}"


def watch(log: str, label: str, stage: str) -> Watch:
    """The known lines of the installer's log at `log` (absent: none yet)."""
    command = f"grep -E {shlex.quote(HOST_PATTERN)} {shlex.quote(log)} 2>/dev/null || true"
    return Watch(command, lambda lines, seconds: line(label, stage, lines, seconds))
