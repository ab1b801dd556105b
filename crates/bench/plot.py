"""Plot Available VLLMServices over time from a bench results JSON.

    python plot.py bench/results-<ts>.json bench/available-<ts>.png

One panel per M; one line per run (Available), dashed: VLLMServices created.
Run by hack/bench.sh with matplotlib from target/bench-venv.
"""

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(src: str, dst: str) -> None:
    with open(src) as f:
        report = json.load(f)
    sizes = report["sizes"]
    fig, axes = plt.subplots(1, len(sizes), figsize=(6 * len(sizes), 4.2), squeeze=False)
    for ax, size in zip(axes[0], sizes):
        m = size["m"]
        for run in size["runs"]:
            tl = run["timeline"]
            if not tl:
                continue
            t = [p[0] for p in tl]
            (line,) = ax.plot(t, [p[2] for p in tl], label=f"run {run['run']} Available")
            ax.plot(t, [p[1] for p in tl], linestyle="--", linewidth=0.8,
                    color=line.get_color(), label=f"run {run['run']} created")
        for q in (0.5, 0.9):
            ax.axhline(q * m, color="grey", linewidth=0.5, linestyle=":")
        ax.set_title(f"M = {m} VLLMServices ({report['variant']})")
        ax.set_xlabel("seconds since the first create")
        ax.set_ylabel("count")
        ax.set_ylim(0, m * 1.05)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    fig.suptitle(f"vllmservice-operator, {report['cluster']['nodes']} kwok nodes, "
                 f"{report['timestamp']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(dst, dpi=110)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
