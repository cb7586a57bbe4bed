"""What `make bench` writes (see tests.bench.run): the Markdown table, the plots, the blocks of the
Benchmarks page."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def spread_report(r: dict[str, Any], out: Path) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3))
    ax.bar(range(1440), r["per_minute"], width=1.0)
    ax.axhline(r["mean_per_min"], color="black", linewidth=0.8)
    ax.set_xlabel("minute of the day (UTC)")
    ax.set_ylabel("fires")
    ax.set_title(f"{r['schedules']:,} daily schedules with spreadMs = 1 day")
    fig.tight_layout()
    fig.savefig(out / "spread.png", dpi=100)
    plt.close(fig)
    return (
        f'Measured {r["date"]} on {r["machine"]} with `{r["command"]}`: {r["schedules"]:,} daily "anytime" '
        f"schedules (a daily cron, `spreadMs` 86400000). Per second: mean {r['mean_per_s']}, max "
        f"{r['max_per_s']} (without spread: {r['unspread_max_per_s']:,} at midnight). Per minute: mean "
        f"{r['mean_per_min']}, min {r['min_per_min']}, max {r['max_per_min']}, standard deviation "
        f"{r['stdev_per_min']} (uniformly random slots: {r['poisson_stdev_per_min']}). Their instants were "
        f"computed in {r['computed_in_s']} s by the punctuator's evaluator.\n\n"
        f"![fires per minute of the day]({doc_image(out / 'spread.png')})\n"
    )


def table(results: dict[str, Any]) -> str:
    rows = results["firing"]
    lines = [
        f"Measured {results['date']} on {results['machine']} with `{results['command']}` "
        f"({results.get('duration_s', '?')} s per firing scenario); broker: {results['broker']}.",
        "",
        "| layer | schedules | expected fires/s | fires/s | lateness p50 ms | p99 ms | max ms | missed | RSS MB | state on disk MB | assign s | CPU µs/fire |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r['layer']} | {r['schedules']:,} | {r['expected_fires_per_s']:,} | {r['fires_per_s']:,} | "
            f"{r['lateness_p50_ms']} | {r['lateness_p99_ms']} | {r['lateness_max_ms']} | {r.get('missed', '')} | "
            f"{r.get('rss_mb', '')} | {r.get('state_mb', '')} | {r.get('assign_s', r.get('rebuild_s', ''))} | "
            f"{r.get('cpu_us_per_fire', '')} |"
        )
    lines.append("")
    for r in rows:
        if "inserts_per_s" in r:
            on = f" ({r['broker']})" if "broker" in r else ""
            lines.append(
                f"- commands{on}: {r['schedules']:,} INSERTs through the commands topic, {r['inserts_per_s']:,}/s, "
                f"all live after {r['live_after_s']} s"
            )
    if results.get("ceiling"):
        lines += [
            "",
            "The ceiling, end to end (N schedules each firing every second: a burst of N a second; each step "
            "a fresh worker; sustained: nothing missed, p99 ≤ 1 s, the window's last third not later than its "
            "first by more than 250 ms at p50):",
            "",
            "| fires/s asked | fires/s | lateness p50 ms | p99 ms | max ms | drift ms | missed | produce p99 ms | delivery p99 ms | RSS MB | sustained |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for r in results["ceiling"]:
            lines.append(
                f"| {r['expected_fires_per_s']:,} | {r['fires_per_s']:,} | {r['lateness_p50_ms']} | "
                f"{r['lateness_p99_ms']} | {r['lateness_max_ms']} | {r['lateness_drift_ms']} | {r['missed']} | "
                f"{r['produce_lateness_p99_ms']} | {r['delivery_p99_ms']} | {r['rss_mb']} | "
                f"{'yes' if r['sustained'] else 'no'} |"
            )
    if results.get("workers"):
        lines += [
            "",
            "Workers sharing one app's schedules (the README workload; all on this machine's 2 cores with the "
            "broker; then the last worker stops cleanly and the others take its partitions over):",
            "",
            "| workers | schedules | fires/s | lateness p50 ms | p99 ms | missed | partitions per worker | RSS MB per worker | takeover s | all partitions firing s |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for r in results["workers"]:
            lines.append(
                f"| {r.get('workers', 1)} | {r['schedules']:,} | {r['fires_per_s']:,} | {r['lateness_p50_ms']} | "
                f"{r['lateness_p99_ms']} | {r['missed']} | {r.get('partitions_per_worker', [8])} | "
                f"{r.get('rss_mb_per_worker', [r['rss_mb']])} | {r.get('takeover_s', '')} | "
                f"{r.get('all_partitions_firing_s', '')} |"
            )
    lines.append("")
    for r in results.get("commands", []):
        lines.append(
            f"- commands ceiling ({r.get('broker', '')}, transactions {'on' if r['transactions'] else 'off'}): "
            f"{r['inserts']:,} INSERTs produced at once in {r['produced_in_s']} s, all applied after "
            f"{r['applied_in_s']} s: {r['inserts_per_s']:,}/s (RSS {r['rss_mb']} MB"
            + (f", worker CPU {r['worker_cpu_us_per_insert']} µs an INSERT)" if "worker_cpu_s" in r else ")")
        )
    for r in results.get("http", []):
        lines.append(
            f"- schedules created over HTTP ({r.get('broker', '')}), {r['how']}: {r['schedules']:,} in "
            f"{r['seconds']} s to all applied, {r['schedules_per_s']:,}/s"
        )
    for name in ("events", "lists", "recovery", "failed"):
        for r in results.get(name, []):
            lines.append(f"- {name}: " + ", ".join(f"{k} {v}" for k, v in r.items()))
    return "\n".join(lines) + "\n"


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for layer in sorted({r["layer"] for r in results["firing"]}):
        rows = sorted((r for r in results["firing"] if r["layer"] == layer and r["lateness_p99_ms"] is not None),
                      key=lambda r: r["schedules"])  # fmt: skip
        if rows:
            ax.plot(
                [r["schedules"] for r in rows],
                [max(r["lateness_p99_ms"], 1) for r in rows],
                marker="o",
                label=layer,
            )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("live cron schedules")
    ax.set_ylabel("fire lateness p99, ms")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_scale(results: dict[str, Any], path: Path) -> None:
    """RSS, state on disk and fires/s against the number of schedules, per layer that reports them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    panels = (("rss_mb", "RSS, MB"), ("state_mb", "state on disk, MB"), ("fires_per_s", "fires/s"))
    layers = sorted({r["layer"] for r in results["firing"]})
    for ax, (field, label) in zip(axes, panels, strict=True):
        for i, layer in enumerate(layers):
            rows = sorted((r for r in results["firing"] if r["layer"] == layer and r.get(field)),
                          key=lambda r: r["schedules"])  # fmt: skip
            if len(rows) > 1 or (rows and field != "fires_per_s"):
                xs, ys = [r["schedules"] for r in rows], [r[field] for r in rows]
                ax.plot(xs, ys, marker="o", label=layer, color=f"C{i % 10}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("live schedules")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def update_readme(readme: Path, text: str, block: str = "bench") -> None:
    begin, end = f"<!-- {block}:begin -->", f"<!-- {block}:end -->"
    if not readme.exists():
        return
    s = readme.read_text()
    if begin in s and end in s:
        s = s[: s.index(begin) + len(begin)] + "\n" + text + s[s.index(end) :]
        readme.write_text(s)


def doc_image(path: Path) -> str:
    """A plot's link on the docs site: the site serves the repository's result folders under assets/
    (docs/hooks.py); a folder outside the repository keeps its own path."""
    return str(path) if path.is_absolute() else f"assets/{path}"
