"""Turn one run's results into a Markdown table and a multi-panel PNG."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from . import anchors
from .latency import CLIENT, HANDOFF, OPERATIONS, PAIR
from .uncontended import DISTINCT, FLOOR, FLOOR_BARE, PING, PING_BARE, SAME, SCRIPTS_BARE


def _number(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if value != value:  # NaN
        return "n/a"
    if isinstance(value, int):
        return f"{value:,}"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}" if abs(value) < 10 else f"{value:.1f}"


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_number(cell) for cell in row) + " |" for row in rows]
    return [*lines, ""]


def markdown(results: dict[str, Any]) -> str:
    env, sections = results["environment"], results["sections"]
    lines = [
        "# distlock benchmarks",
        "",
        f"Run `{results['command']}` on {env['date']}: {env['machine']}, {env['cpus']} CPUs, "
        f"Python {env['python']}, redis-server {env['redis_server']}, redis-py "
        f"{env['packages']['redis']} (hiredis {env['packages']['hiredis'] or 'absent'}). "
        f"Load average {env['load_average_at_start']} at the start, "
        f"{results.get('load_average_at_end')} at the end. Profile `{results['profile']['name']}`"
        f", {results['duration_s']:.0f} s. Ratios are distlock over the anchor, taken within "
        "the same run (medians of per-round ratios); figures on a shared machine are noisy.",
        "",
        "## Targets",
        "",
    ]
    lines += _table(
        ["target", "measured", "limit", "met"],
        [
            [t["target"], t["value"], t["limit"], "yes" if t["met"] else "**NO**"]
            for t in results["targets"]
        ],
    )
    pairs = sections.get("uncontended")
    if pairs:
        lines += ["## Physical floor (one connection)", ""]
        lines += _table(
            ["case", "ops/s", "us per op"],
            [
                [name, pairs["floor"][name]["per_s"], pairs["floor"][name]["us"]]
                for name in (PING, PING_BARE, FLOOR, FLOOR_BARE)
                if name in pairs["floor"]
            ],
        )
        if SCRIPTS_BARE in pairs["floor"]:
            ceiling = pairs["floor"][SCRIPTS_BARE]
            lines += [
                f"distlock's own acquire and release scripts, pre-packed and written to a bare "
                f"connection like the bare floor, take {ceiling['us']} us per pair: "
                f"{pairs['scripts_bare_vs_bare_floor']}x the bare floor's speed. That is the "
                "most any client could reach with them; the rest of the gap to the bare floor "
                "is the server's work for metadata, index, fencing token and queue.",
                "",
            ]
        lines += ["## Uncontended acquire+release", ""]
        rows = []
        for library in anchors.UNCONTENDED_LIBRARIES:
            row: list[Any] = [library]
            for mode in (SAME, DISTINCT):
                measured = pairs["locks"][mode][library]
                ratio = pairs["distlock_ratios"][mode].get(f"vs {library}", "")
                row += [measured["per_s"], measured["us"], ratio]
            rows.append(row)
        for floor in (FLOOR, FLOOR_BARE):
            rows.append(
                [f"floor: {floor}"]
                + [
                    cell
                    for mode in (SAME, DISTINCT)
                    for cell in (
                        pairs["floor"][floor]["per_s"],
                        pairs["floor"][floor]["us"],
                        pairs["distlock_ratios"][mode][f"vs {floor}"],
                    )
                ]
            )
        lines += _table(
            [
                "library",
                "same name pairs/s",
                "us",
                "distlock ratio",
                "distinct names pairs/s",
                "us",
                "distlock ratio",
            ],
            rows,
        )
        if pairs.get("commands"):
            lines += ["What one pair asks of the server (MONITOR):", ""]
            lines += _table(
                ["library", "client calls", "arguments per call", "server commands"],
                [
                    [
                        library,
                        counts["client_calls_per_pair"],
                        counts["arguments_per_call"],
                        counts["server_commands_per_pair"],
                    ]
                    for library, counts in pairs["commands"].items()
                ],
            )
    if sections.get("latency"):
        lines += _latency(sections["latency"])
    if sections.get("server_time"):
        lines += _server_time(sections["server_time"])
    contention = sections.get("contention")
    if contention:
        lines += _contention(contention)
    memory = sections.get("memory")
    if memory:
        lines += [f"## Redis memory per held lock ({memory['locks']:,} locks)", ""]
        rows = [[library, value] for library, value in memory["bytes_per_lock"].items()]
        rows.append(
            [
                "distlock, per name after release (fencing memory: one key per bucket)",
                memory["distlock_bytes_per_released_name"],
            ]
        )
        lines += _table(["library", "bytes"], rows)
        checks = memory.get("anchor_key_checks", {})
        if checks:
            same = all(check["same"] for check in checks.values())
            lines += [
                f"The anchors' locks are pipelined copies of the SET each one's acquire() "
                f"sends; one lock taken through each library had "
                f"{'the same' if same else '**not** the same'} key and value lengths.",
                "",
            ]
    scale = sections.get("scale")
    if scale:
        lines += ["## Acquire+release latency vs locks held", ""]
        columns = [key for key in next(iter(scale["levels"].values()))]
        rows = [[int(level), *values.values()] for level, values in scale["levels"].items()]
        lines += _table(["held locks", *columns], rows)
        lines += [
            f"Growth at {scale['largest_level']:,}: distlock {scale['distlock_growth']}x, "
            f"reference {scale['reference_growth']}x, distlock / reference "
            f"{scale['distlock_growth_vs_reference']}x.",
            "",
        ]
    listing = sections.get("listing")
    if listing:
        lines += [
            f"## Listing {listing['locks']:,} held locks (median of "
            f"{listing['repeats']} listings, seconds)",
            "",
        ]
        lines += _table(
            ["listing", "median s", "max s"],
            [
                [
                    "one walk of the index (iter_held)",
                    listing["iter_held_s"],
                    listing["iter_held_max_s"],
                ],
                ["manage.py distlock list --json", listing["command_s"], listing["command_max_s"]],
            ],
        )
        separate = listing.get("separate_run")
        if separate:  # a section added to a run that predates it
            lines += [
                f"Measured in a run of its own: `{separate['command']}` on "
                f"{separate['date']} (commit {separate['git_commit']}), load average "
                f"{separate['load_average_at_start']} at the start.",
                "",
            ]
    for name, external in sections.get("external", {}).items():
        lines += _external(name, external)
    return "\n".join(lines)


def _latency(latency: dict[str, Any]) -> list[str]:
    libraries = anchors.LATENCY_LIBRARIES
    fits = latency["fits"]
    delays = ", ".join(f"{delay:g}" for delay in latency["delays_ms"])
    floor = fits[FLOOR][CLIENT]
    lines = [
        f"## Round trips per operation (a delaying proxy per server, one-way delays {delays} ms)",
        "",
        "Time = a + k x RTT, fitted by least squares through the median time at each delay; "
        f"each k divided by a bare PING's from the same run (the PING's own k: "
        f"{latency['ping_k']}). A bare SET NX PX + DEL pair reads {floor['calibrated']}. "
        "The limit is the least any client can do; lower is better. A waiter that polls is "
        "bound by its poll interval, not by round trips: its handoff shows its median time "
        "at 0 delay.",
        "",
    ]
    lines += _table(["operation", "limit", *libraries], _latency_rows(latency, "calibrated"))
    lines += [
        f"Bias check: the same, fitted over the delays from {latency['large_from_ms']:g} ms "
        f"up only (the PING's k there: {latency['ping_k_large']}).",
        "",
    ]
    lines += _table(["operation", "limit", *libraries], _latency_rows(latency, "calibrated_large"))
    lines += ["Every fit (median ms at each one-way delay in ms):", ""]
    rows = [
        [
            operation,
            library,
            fit["a_ms"],
            fit["k"],
            fit["calibrated"],
            fit["calibrated_large"],
            *fit["median_ms"].values(),
        ]
        for operation, by_library in fits.items()
        for library, fit in by_library.items()
    ]
    return lines + _table(
        [
            "operation",
            "library",
            "a ms",
            "k",
            "calibrated",
            "calibrated (large)",
            *latency["fits"][PAIR][anchors.DISTLOCK]["median_ms"],
        ],
        rows,
    )


def _latency_rows(latency: dict[str, Any], figure: str) -> list[list[Any]]:
    rows = []
    for operation in OPERATIONS:
        if operation not in latency["fits"]:  # a run from before it was measured
            continue
        row: list[Any] = [operation, latency["limits"][operation]]
        for library in anchors.LATENCY_LIBRARIES:
            fit = latency["fits"][operation].get(library)
            if fit is None:
                row.append("-")
            elif fit["poll_bound"]:
                first = next(iter(fit["median_ms"].values()))
                row.append(
                    f"poll-bound: {_number(first)} ms at 0 delay ({latency['polling'][library]})"
                )
            else:
                row.append(fit[figure])
        rows.append(row)
    return rows


def _server_time(server_time: dict[str, Any]) -> list[str]:
    libraries = server_time["libraries"]
    theirs = libraries[anchors.REDIS_PY]["us_per_pair"]
    lines = [
        "## Server time per uncontended acquire+release (INFO commandstats)",
        "",
        "The usec of the commands each library sends (a script's time includes the "
        "commands it runs), over the pairs.",
        "",
    ]
    rows = [
        [
            library,
            measured["us_per_pair"],
            round(measured["us_per_pair"] / theirs, 2) if theirs else "",
            ", ".join(f"{name} x{calls:g}" for name, calls in measured["calls_per_pair"].items()),
        ]
        for library, measured in libraries.items()
    ]
    lines += _table(
        ["library", "us per pair", f"x {anchors.REDIS_PY}", "commands sent per pair"], rows
    )
    floor = server_time.get("commands_only")
    if floor:
        lines += [
            f"The commands distlock's scripts run, with constant values and no Lua logic "
            f"(benchmarks/server_time.py COMMANDS_ONLY), take {floor['us_per_pair']} us "
            f"per pair: {floor['vs_redis_py']}x {anchors.REDIS_PY}'s whole pair, before "
            "any of distlock's own work.",
            "",
        ]
    return lines


def _external(name: str, data: dict[str, Any]) -> list[str]:
    """A section another script wrote: its ``rows`` as a table; otherwise each dict of dicts
    (per mode, per page, per library...) as a table, and the remaining numbers as a list."""
    lines = [f"## {data.get('title', name)}", ""]
    if data.get("error"):
        return [*lines, f"Not measured: {data['error']}", ""]
    if data.get("table"):  # the script's own summary (its rows are in the JSON)
        return [*lines, data["table"], ""]
    rows = data.get("rows")
    if rows:
        header = list(dict.fromkeys(key for row in rows for key in row))
        return lines + _table(header, [[row.get(key, "") for key in header] for row in rows])
    if data.get("benchmark"):
        lines += [str(data["benchmark"]), ""]
    rest = {}
    for key, value in data.items():
        if key in ("targets", "title", "machine", "exit_status"):
            continue
        if isinstance(value, dict) and value and all(isinstance(v, dict) for v in value.values()):
            header = list(
                dict.fromkeys(
                    column
                    for inner in value.values()
                    for column, cell in inner.items()
                    if isinstance(cell, (int, float, str, bool))
                )
            )
            lines += [f"{key}:", ""]
            lines += _table(
                [key, *header],
                [
                    [label, *(inner.get(column, "") for column in header)]
                    for label, inner in value.items()
                ],
            )
        else:
            rest[key] = value
    flat = _flatten(rest)
    if flat:
        lines += _table(["measure", "value"], [list(item) for item in flat])
    return lines


def _flatten(data: Any, prefix: str = "") -> list[tuple[str, Any]]:
    if isinstance(data, dict):
        return [item for key, value in data.items() for item in _flatten(value, f"{prefix}{key}.")]
    if isinstance(data, (int, float)) and not isinstance(data, bool):
        return [(prefix.rstrip("."), data)]
    return []


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sections = results["sections"]
    figure, axes = plt.subplots(3, 3, figsize=(17, 14))
    colours = {
        anchors.DISTLOCK: "#1f77b4",
        anchors.DISTLOCK_NON_FAIR: "#17becf",
        anchors.REDIS_PY: "#d62728",
        anchors.PYTHON_REDIS_LOCK: "#2ca02c",
        anchors.POTTERY: "#9467bd",
        anchors.REDLOCK_PY: "#ff7f0e",
        CLIENT: "#7f7f7f",
    }
    _plot_uncontended(axes[0][0], sections.get("uncontended"), colours)
    _plot_contention(axes[0][1], axes[0][2], sections.get("contention"), colours)
    _plot_scale(axes[1][0], sections.get("scale"), colours)
    _plot_memory(axes[1][1], sections.get("memory"), colours)
    _plot_targets(axes[1][2], results["targets"])
    for ax, operation in ((axes[2][0], PAIR), (axes[2][1], HANDOFF)):
        _plot_latency(ax, operation, sections.get("latency"), colours)
    _plot_server_time(axes[2][2], sections.get("server_time"), colours)
    env = results["environment"]
    figure.suptitle(
        f"distlock benchmarks ({results['profile']['name']} run, {env['date']}; "
        f"{env['machine']}, {env['cpus']} CPUs, load {env['load_average_at_start']})",
        fontsize=11,
    )
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def _plot_uncontended(ax: Any, pairs: dict[str, Any] | None, colours: dict[str, str]) -> None:
    ax.set_title("Uncontended acquire+release (us per pair, lower is better)", fontsize=10)
    if not pairs:
        return
    libraries = anchors.UNCONTENDED_LIBRARIES
    width = 0.38
    for offset, mode in ((-width / 2, SAME), (width / 2, DISTINCT)):
        values = [pairs["locks"][mode][library]["us"] for library in libraries]
        bars = ax.bar(
            [i + offset for i in range(len(libraries))],
            values,
            width,
            color=[colours[library] for library in libraries],
            alpha=1.0 if mode == SAME else 0.55,
            label=mode,
        )
        ax.bar_label(bars, fmt="%.0f", fontsize=7)
    for floor, style in ((FLOOR, "--"), (FLOOR_BARE, ":")):
        ax.axhline(
            pairs["floor"][floor]["us"],
            color="black",
            linestyle=style,
            linewidth=1,
            label=f"floor: {floor}",
        )
    ax.set_xticks(
        range(len(libraries)), [lib.replace(" ", "\n", 1) for lib in libraries], fontsize=8
    )
    ax.set_yscale("log")
    ax.legend(fontsize=7)


def _contention(contention: dict[str, Any]) -> list[str]:
    """The contention section: quiet, then loaded (absent from runs made before it was
    measured), the ratios to the anchors, where the time goes, and the long waits."""
    lines = [
        f"## Contention: K processes, one lock, read-modify-write inside "
        f"({contention['seconds_per_run']} s per run; redis-py's Lock polls every "
        f"{contention['redis_py_sleep_s'] * 1000:g} ms)",
        "",
    ]
    separate = contention.get("separate_run")
    if separate:  # measured again after the rest of the run (a section that changed)
        lines += [
            f"Measured in a run of its own: `{separate['command']}` on {separate['date']} "
            f"(commit {separate['git_commit']}).",
            "",
        ]
    loaded = contention.get("loaded")
    modes = {"quiet": contention, **({"loaded": loaded} if loaded else {})}
    for mode, measured in modes.items():
        lines += _contention_mode(mode, measured)
    lines += ["distlock's ratios (median over repeats of each repeat's ratio):", ""]
    rows = [
        [mode, k, *ratios.values()]
        for mode, measured in modes.items()
        for k, ratios in measured["distlock_ratios"].items()
    ]
    lines += _table(["mode", "K", *next(iter(contention["distlock_ratios"].values()))], rows)
    if "time_budget" in next(iter(contention["by_k"]["K=2"].values())):
        lines += _time_budget(modes)
    for mode, measured in modes.items():
        lines += [f"Long waits ({mode}):", ""] if loaded else []
        lines += _long_waits(measured)
    return lines


def _contention_mode(mode: str, measured: dict[str, Any]) -> list[str]:
    load = measured.get("load_average")
    lines = []
    if load:
        beside = (
            f" with {measured['busy_loops']} busy-loop processes beside the workers"
            if "busy_loops" in measured
            else " (the machine as it was: other work counts in the load average)"
        )
        lines += [
            f"**{mode}**{beside}; load average {load['before']} before, {load['after']} after:",
            "",
        ]
    rows = [
        [
            k,
            library,
            one["acquisitions_per_s"],
            one["handoffs_per_s"],
            one["wait_median_ms"],
            one["wait_p99_ms"],
            one["wait_max_ms"],
            one.get("fewest_over_most_acquisitions", "n/a"),
            one.get("workers_cpu_us_per_acquisition", "n/a"),
            one.get("server_cpu_us_per_acquisition", "n/a"),
            one["lost_updates"],
        ]
        for k, row in measured["by_k"].items()
        for library, one in row.items()
    ]
    return lines + _table(
        [
            "K",
            "library",
            "acquisitions/s",
            "handoffs/s",
            "wait median ms",
            "wait p99 ms",
            "wait max ms",
            "fewest / most acquisitions per process",
            "CPU us per acquisition: processes",
            "server",
            "lost updates",
        ],
        rows,
    )


def _time_budget(modes: dict[str, dict[str, Any]]) -> list[str]:
    """Where the lock's time goes (benchmarks/contention_analysis.py)."""
    rows = []
    bounds: list[str] = []
    for mode, measured in modes.items():
        for k, row in measured["by_k"].items():
            for library, one in row.items():
                budget = one["time_budget"]
                bounds = list(budget["hybrid"])
                rows.append(
                    [
                        mode,
                        k,
                        library,
                        _or_na(budget["cycle_us"]),
                        _or_na(budget["work_us"]),
                        _or_na(budget["hold_run_queue_us"]),
                        _or_na(budget["handoff_share"]),
                        _or_na(budget["handover_us"]),
                        _or_na(budget["handover_waiter_run_queue_us"]),
                        _or_na(budget["retake_handover_us"]),
                        *(
                            f"{_number(hybrid['young_handoff_share'])} / "
                            f"{_number(hybrid['run_queue_share_of_time'])}"
                            for hybrid in budget["hybrid"].values()
                        ),
                    ]
                )
    lines = [
        "Where the lock's time goes (us, means per acquisition): a cycle is one acquisition to "
        "the next, the work from acquire() returned to release() called (GET and SET; its "
        "run-queue delay is the holder's from acquire() returned to release() returned), a "
        "handover from release() called to the next holder's acquire() returned, after a "
        "handoff to another process or a retake by the same one; the waiter's run-queue "
        "delay is its wait's, capped at the handover. Young handoffs: the share of handoffs "
        "whose next holder had waited under the bound at release / the run-queue delay in "
        "their handovers as a share of the run, the most a hybrid with that bound could give "
        "to running contenders.",
        "",
    ]
    return lines + _table(
        [
            "mode",
            "K",
            "library",
            "cycle",
            "work",
            "holder's run queue",
            "handoff share",
            "handover",
            "handover: waiter's run queue",
            "retake handover",
            *(f"young handoffs < {bound}" for bound in bounds),
        ],
        rows,
    )


def _long_waits(contention: dict[str, Any]) -> list[str]:
    """The table of the long waits and the run-queue delay in them (absent from runs made
    before the workers reported it)."""
    rows = []
    for k, row in contention["by_k"].items():
        for library, measured in row.items():
            if "long_waits" not in measured:
                return []
            rows.append(
                [
                    k,
                    library,
                    measured["wait_p999_ms"],
                    measured["wait_max_ms"],
                    _or_na(measured["worst_wait_waiter_run_queue_ms"]),
                    _or_na(measured["worst_wait_holders_run_queue_ms"]),
                    measured["long_wait_threshold_ms"],
                    measured["long_waits"],
                    _or_na(measured["long_waits_scheduler_bound"]),
                ]
            )
    times = contention.get("long_wait_p99s", 5)
    lines = [
        f"Long waits, every library alike: run-queue delay is the time a process was "
        f"runnable but not running (/proc/self/schedstat); the holders' is that of the "
        f"processes holding the lock during the wait, each capped at its overlap with it. "
        f"A long wait (over {times:g} p99s) is scheduler-bound when these delays cover at "
        f"least half its excess over the p99. No wait is dropped from any figure.",
        "",
    ]
    return lines + _table(
        [
            "K",
            "library",
            "wait p99.9 ms",
            "wait max ms",
            "max: waiter's run queue ms",
            "max: holders' run queue ms",
            "long wait from ms",
            "long waits",
            "of which scheduler-bound",
        ],
        rows,
    )


def _or_na(value: Any) -> Any:
    return "n/a" if value is None else value


def _plot_contention(
    rate_ax: Any, wait_ax: Any, contention: dict[str, Any] | None, colours: dict[str, str]
) -> None:
    rate_ax.set_title("Contention: cross-process handoffs/s (higher is better)", fontsize=10)
    wait_ax.set_title("Contention: p99 / max wait, ms (lower is better)", fontsize=10)
    if not contention:
        return
    ks = [int(key[2:]) for key in contention["by_k"]]
    for library in anchors.CONTENDED_LIBRARIES:
        rows = [contention["by_k"][f"K={k}"][library] for k in ks]
        rate_ax.plot(
            ks,
            [row["handoffs_per_s"] for row in rows],
            marker="o",
            color=colours[library],
            label=library,
        )
        wait_ax.plot(
            ks,
            [row["wait_p99_ms"] for row in rows],
            marker="o",
            color=colours[library],
            label=f"{library} p99",
        )
        wait_ax.plot(
            ks,
            [row["wait_max_ms"] for row in rows],
            marker="x",
            linestyle=":",
            color=colours[library],
            label=f"{library} max",
        )
    loaded = contention.get("loaded")
    for library in anchors.CONTENDED_LIBRARIES if loaded else ():
        rate_ax.plot(
            ks,
            [loaded["by_k"][f"K={k}"][library]["handoffs_per_s"] for k in ks],
            marker="s",
            linestyle="--",
            color=colours[library],
            label=f"{library}, loaded",
        )
    for ax in (rate_ax, wait_ax):
        ax.set_xticks(ks)
        ax.set_xlabel("K processes")
        ax.legend(fontsize=7)
    wait_ax.set_yscale("log")


def _plot_scale(ax: Any, scale: dict[str, Any] | None, colours: dict[str, str]) -> None:
    ax.set_title("Acquire+release latency vs locks held (median us)", fontsize=10)
    if not scale:
        return
    levels = [int(level) for level in scale["levels"]]
    for library in (anchors.DISTLOCK, anchors.REDIS_PY):
        values = [scale["levels"][str(level)][f"{library} median_us"] for level in levels]
        label = library if library == anchors.DISTLOCK else f"{library} (noise reference)"
        ax.plot(levels, values, marker="o", color=colours[library], label=label)
    ax.set_xscale("log")
    ax.set_ylim(bottom=0)
    ax.set_xlabel("locks held")
    ax.legend(fontsize=7)


def _plot_memory(ax: Any, memory: dict[str, Any] | None, colours: dict[str, str]) -> None:
    ax.set_title("Redis memory per held lock (bytes)", fontsize=10)
    if not memory:
        return
    labels = [*memory["bytes_per_lock"], "distlock\nafter release"]
    values = [*memory["bytes_per_lock"].values(), memory["distlock_bytes_per_released_name"]]
    bars = ax.bar(
        range(len(values)), values, color=[colours.get(label, "#7f7f7f") for label in labels]
    )
    ax.bar_label(bars, fmt="%.0f", fontsize=8)
    ax.set_xticks(range(len(values)), labels, fontsize=8)


def _plot_latency(
    ax: Any, operation: str, latency: dict[str, Any] | None, colours: dict[str, str]
) -> None:
    ax.set_title(f"{operation}: median ms vs added RTT (slope: round trips)", fontsize=10)
    if not latency:
        return
    shown = {**latency["fits"][operation], f"PING ({CLIENT})": latency["fits"][PING][CLIENT]}
    for library, fit in shown.items():
        rtts = [2 * float(delay) for delay in fit["median_ms"]]
        label = f"{library}: {fit['calibrated']:.2f}" + (" (polls)" if fit["poll_bound"] else "")
        ax.plot(
            rtts,
            list(fit["median_ms"].values()),
            marker="o",
            label=label,
            color=colours.get(library, colours[CLIENT]),
            linestyle=":" if library.startswith("PING") else "-",
        )
    if operation == HANDOFF:
        ax.set_yscale("log")
    ax.set_xlabel("added round trip, ms")
    ax.legend(fontsize=7)


def _plot_server_time(ax: Any, server_time: dict[str, Any] | None, colours: dict[str, str]) -> None:
    ax.set_title("Server time per acquire+release (us, INFO commandstats)", fontsize=10)
    if not server_time:
        return
    libraries = list(server_time["libraries"])
    values = [server_time["libraries"][library]["us_per_pair"] for library in libraries]
    bars = ax.bar(range(len(values)), values, color=[colours[library] for library in libraries])
    ax.bar_label(bars, fmt="%.1f", fontsize=8)
    ax.set_xticks(range(len(values)), [lib.replace(" ", "\n", 1) for lib in libraries], fontsize=8)


def _plot_targets(ax: Any, targets: list[dict[str, Any]]) -> None:
    ax.set_title("Targets (green: met, red: not met)", fontsize=10)
    ax.axis("off")
    step = min(0.062, 1 / max(len(targets), 1))
    size = 8 if step >= 0.05 else 7
    for row, target in enumerate(targets):
        colour = "#2ca02c" if target["met"] else "#d62728"
        ax.text(
            0.0,
            1 - row * step,
            f"{_number(target['value'])} {target['limit']}",
            color=colour,
            fontsize=size,
            transform=ax.transAxes,
            family="monospace",
            verticalalignment="top",
        )
        ax.text(
            0.3,
            1 - row * step,
            target["target"],
            fontsize=size,
            transform=ax.transAxes,
            verticalalignment="top",
        )
