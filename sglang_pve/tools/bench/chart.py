"""The comparison chart: single-stream output tok/s per configuration, ratio to the baseline on
each bar, failed configurations as an empty hatched slot labelled with why."""

from pathlib import Path

from sglang_pve.tools.bench.results import ratios


def write_png(records: list[dict], path: Path, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")  # no display on a controller or in CI
    import matplotlib.pyplot as plt

    names = [r["configuration"] for r in records]
    values = [
        (r.get("single_stream") or {}).get("output_throughput", 0.0) if r["status"] == "ok" else 0.0 for r in records
    ]
    ratio = ratios(records)
    top = max(values + [1.0])
    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(names)), 4.5))
    bars = ax.bar(
        names,
        values,
        color=["#4c72b0" if v else "none" for v in values],
        edgecolor=["#4c72b0" if v else "#c44e52" for v in values],
        hatch=None,
    )
    for bar, record, value in zip(bars, records, values, strict=True):
        if value:
            label = f"{value:.1f}" + (
                f"\nx{ratio[record['configuration']]:.3f}" if record["configuration"] in ratio else ""
            )
            ax.text(bar.get_x() + bar.get_width() / 2, value, label, ha="center", va="bottom", fontsize=9)
        else:
            bar.set_height(top * 0.15)
            bar.set_hatch("//")
            ax.text(
                bar.get_x() + bar.get_width() / 2,
                top * 0.16,
                "failed to start",
                ha="center",
                va="bottom",
                fontsize=8,
                color="#c44e52",
            )
    ax.set_ylabel("single-stream output tok/s")
    ax.set_ylim(0, top * 1.25)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
