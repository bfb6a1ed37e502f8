"""The probe's raw trials -> per-size latency and bus bandwidth, per-regime scores, winners.

A profile's score in a regime is, per trial, the geometric mean over that regime's sizes of its
latency relative to the reference profile's median latency at that size (nccl-defaults when it
ran, so 0.80 reads "20 % faster than NCCL's defaults"). Lower is better. The overall score of a
trial weighs the regimes by the host's workload mix: exp(sum w_r * log score_r).

A winner is named only outside the noise: the best profile (lowest median score) wins when the
upper quartile of its per-trial scores lies below the lower quartile of every other profile's
(with fewer than 5 trials: its slowest trial below every other profile's fastest).
Otherwise the regime is a tie between the best and every profile whose quartiles overlap it:
naive timing cannot tell them apart, and the probe says so instead of picking one.

Bus bandwidth follows nccl-tests: algbw = bytes / time, busbw = algbw * 2 (n - 1) / n.
"""

import math
import statistics
from dataclasses import dataclass, field

REGIMES = ("decode", "prefill")
REFERENCE = "nccl-defaults"
MIN_TRIALS_FOR_QUARTILES = 5


@dataclass(frozen=True)
class Verdict:
    """The outcome of one regime (or overall): a winner, or the profiles it cannot separate."""

    regime: str
    winner: str | None
    tied: tuple = ()
    scores: dict = field(default_factory=dict)  # profile -> (p25, median, p75)

    def describe(self) -> str:
        if self.winner:
            return f"{self.winner} (outside the noise)"
        if self.tied:
            return f"no winner outside the noise: {', '.join(self.tied)} overlap"
        return "no profile ran"


def quartiles(values: list) -> tuple:
    """(p25, median, p75), inclusive method; below MIN_TRIALS_FOR_QUARTILES trials the band is the
    whole range (min, median, max): a few trials do not say where the quartiles are."""
    if len(values) < MIN_TRIALS_FOR_QUARTILES:
        return min(values), statistics.median(values), max(values)
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


def bus_bandwidth_gbs(nbytes: int, microseconds: float, world: int) -> float:
    return nbytes / (microseconds * 1e-6) * 2 * (world - 1) / world / 1e9


def ok_profiles(result: dict) -> dict:
    return {name: entry for name, entry in result["profiles"].items() if entry.get("status") == "ok"}


def reference(result: dict) -> str | None:
    ok = ok_profiles(result)
    return REFERENCE if REFERENCE in ok else next(iter(ok), None)


def _medians(entry: dict) -> dict:
    return {row["label"]: statistics.median(row["trials_us"]) for row in entry["sizes"]}


def trial_scores(result: dict, regime: str) -> dict:
    """profile -> [score per trial] in `regime` (relative to the reference's median latency)."""
    ok = ok_profiles(result)
    ref = reference(result)
    if ref is None:
        return {}
    ref_median = _medians(ok[ref])
    scores = {}
    for name, entry in ok.items():
        rows = [row for row in entry["sizes"] if row["regime"] == regime and row["label"] in ref_median]
        if not rows:
            continue
        trials = min(len(row["trials_us"]) for row in rows)
        scores[name] = [
            math.exp(statistics.fmean(math.log(row["trials_us"][t] / ref_median[row["label"]]) for row in rows))
            for t in range(trials)
        ]
    return scores


def mixed_scores(result: dict, mix: dict) -> dict:
    """profile -> [overall score per trial], regimes weighted by `mix` (normalised to sum 1)."""
    per_regime = {regime: trial_scores(result, regime) for regime in REGIMES if mix.get(regime)}
    total = sum(mix[regime] for regime in per_regime)
    names = set.intersection(*(set(s) for s in per_regime.values())) if per_regime else set()
    out = {}
    for name in sorted(names):
        trials = min(len(per_regime[regime][name]) for regime in per_regime)
        out[name] = [
            math.exp(sum(mix[r] / total * math.log(per_regime[r][name][t]) for r in per_regime)) for t in range(trials)
        ]
    return out


def verdict(regime: str, scores: dict) -> Verdict:
    """Name the winner of `scores` (profile -> per-trial scores) only outside the noise."""
    if not scores:
        return Verdict(regime, None)
    summary = {name: quartiles(values) for name, values in scores.items()}
    ranked = sorted(summary, key=lambda name: summary[name][1])
    best = ranked[0]
    overlapping = [name for name in ranked[1:] if summary[name][0] <= summary[best][2]]
    if len(ranked) > 1 and not overlapping:
        return Verdict(regime, best, (), summary)
    return Verdict(regime, None, tuple([best, *overlapping]) if len(ranked) > 1 else (best,), summary)


def analyse(result: dict, mix: dict) -> dict:
    """regime -> Verdict for decode, prefill and overall (the workload mix)."""
    verdicts = {regime: verdict(regime, trial_scores(result, regime)) for regime in REGIMES}
    verdicts["overall"] = verdict("overall", mixed_scores(result, mix))
    return verdicts


def render(result: dict, mix: dict) -> str:
    """The probe's report as text: per-size table, failures, per-regime scores and verdicts."""
    ok = ok_profiles(result)
    ref = reference(result)
    lines = [
        f"NCCL probe on {result.get('host', '?')}: {result.get('world_size')} ranks, backend "
        f"{result.get('backend')}, {result.get('rounds', 1)} fresh process groups per profile x "
        f"{result.get('trials')} trials x {result.get('iters')} all-reduces per graph replay"
    ]
    labels = [row["label"] for row in next(iter(ok.values()))["sizes"]] if ok else []
    if ok:
        lines.append("median latency us (spread % = (max-min)/median over all trials of all rounds)")
        lines.append(f"{'profile':<24}" + "".join(f"{label:>14}" for label in labels))
        for name, entry in ok.items():
            cells = {row["label"]: row for row in entry["sizes"]}
            text = ""
            for label in labels:
                trials = cells[label]["trials_us"] if label in cells else None
                if trials:
                    median = statistics.median(trials)
                    text += f"{median:>8.1f} ±{(max(trials) - min(trials)) / median * 100:>3.0f}%"
                else:
                    text += f"{'-':>14}"
            lines.append(f"{name:<24}{text}")
        lines.append("bus bandwidth GB/s at the median")
        for name, entry in ok.items():
            world = result.get("world_size", 2)
            lines.append(
                f"{name:<24}"
                + "".join(
                    f"{bus_bandwidth_gbs(row['bytes'], statistics.median(row['trials_us']), world):>14.2f}"
                    for row in entry["sizes"]
                )
            )
    for name, entry in result["profiles"].items():
        if entry.get("status") != "ok":
            lines.append(f"{name}: {entry.get('status', 'failed').upper()}: {entry.get('error', '')}")
    verdicts = analyse(result, mix)
    mix_text = ", ".join(f"{regime} {weight:g}" for regime, weight in mix.items())
    lines.append(
        f"scores relative to {ref} (geometric mean over the regime's sizes; lower is faster): "
        "median [p25..p75] over trials"
    )
    for key, v in verdicts.items():
        title = f"overall (mix: {mix_text})" if key == "overall" else key
        lines.append(f"  {title}: {v.describe()}")
        for name, (q1, q2, q3) in sorted(v.scores.items(), key=lambda item: item[1][1]):
            lines.append(f"    {name:<24} {q2:6.3f} [{q1:.3f}..{q3:.3f}]")
    return "\n".join(lines)


if __name__ == "__main__":
    import json
    import sys

    with open(sys.argv[1], encoding="utf-8") as handle:
        data = json.load(handle)
    print(render(data, json.loads(sys.argv[2]) if len(sys.argv) > 2 else {"decode": 0.8, "prefill": 0.2}))
