#!/usr/bin/env python3
"""Turns the raw samples of one Scripts/bench run into the report (stdout).

Usage: Benchmarks/report.py RESULTS_DIR

RESULTS_DIR holds commands.tsv (Benchmarks/harness/benchrun.c), dispatch.json,
warm.json, store.json and exchange.json (ExtrunBench), migration.txt (GNU time
of extrun migrate), memory/*.json (extrun handle's output) and meta.txt. Times are wall-clock milliseconds unless a column says cpu.

Ratios and differences are computed per round (the commands of one round ran
back to back, so a busy moment slows them alike) and then summarized by their
median; [a–b] is the interquartile range of the per-round values, and "95% CI"
is a bootstrap confidence interval of that median.
"""
import glob
import json
import os
import random
import statistics
import sys
from collections import defaultdict

TARGET_SCRIPT_MS = 5.0  # "Scripts/extrun adds only a few ms"
TARGET_COLD_RATIO = 1.5  # extrun handle vs two bare Swift starts
TARGET_WARM_PER_SECOND = 20000  # in-process dispatch with a warm plugin
TARGET_MIGRATION_SECONDS = 20.0  # 1,000,000 globals
TARGET_MIGRATION_MB = 200.0


def quantile(values, q):
    s = sorted(values)
    if not s:
        return float("nan")
    pos = (len(s) - 1) * q
    lo, hi = int(pos), min(int(pos) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def median_ci(values, iterations=2000, seed=1):
    """95% bootstrap confidence interval of the median."""
    if len(values) < 5:
        return (float("nan"), float("nan"))
    rng = random.Random(seed)
    n = len(values)
    medians = sorted(statistics.median(rng.choices(values, k=n)) for _ in range(iterations))
    return medians[int(0.025 * iterations)], medians[int(0.975 * iterations) - 1]


def fmt(x, digits=1):
    return "n/a" if x != x else f"{x:.{digits}f}"


def table(headers, rows, aligns=None):
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) if rows else len(str(h)) for i, h in enumerate(headers)]
    aligns = aligns or ["<"] + [">"] * (len(headers) - 1)
    out = []
    line = "  ".join(f"{h:{a}{w}}" for h, a, w in zip(headers, aligns, widths))
    out.append(line)
    out.append("  ".join("-" * w for w in widths))
    for r in rows:
        out.append("  ".join(f"{str(c):{a}{w}}" for c, a, w in zip(r, aligns, widths)))
    return "\n".join(out)


def main():
    d = sys.argv[1]
    meta = {}
    for line in open(os.path.join(d, "meta.txt")):
        key, _, value = line.rstrip("\n").partition("=")
        meta[key] = value

    # name -> round -> (wall ms, cpu ms, maxrss kB)
    samples = defaultdict(dict)
    dropped = defaultdict(int)  # failed runs (benchrun -F), left out
    for line in open(os.path.join(d, "commands.tsv")):
        name, rnd, wall, cpu, rss = line.rstrip("\n").split("\t")
        if int(wall) < 0:
            dropped[name] += 1
            continue
        samples[name][int(rnd)] = (int(wall) / 1000, int(cpu) / 1000, int(rss))

    def walls(name):
        return [v[0] for v in samples[name].values()]

    def cpus(name):
        return [v[1] for v in samples[name].values()]

    def paired(a, b, op):
        rounds = sorted(set(samples[a]) & set(samples[b]))
        return [op(samples[a][r][0], samples[b][r][0]) for r in rounds]

    def ratio(a, b):
        return paired(a, b, lambda x, y: x / y)

    def diff(a, b):
        return paired(a, b, lambda x, y: x - y)

    def describe(values, unit, digits=2):
        lo, hi = median_ci(values)
        return (f"{fmt(statistics.median(values), digits)}{unit} [{fmt(quantile(values, .25), digits)}–"
                f"{fmt(quantile(values, .75), digits)}] 95% CI {fmt(lo, digits)}–{fmt(hi, digits)}")

    rounds = max((len(v) for v in samples.values()), default=0)
    verdicts = []

    print(f"extrun benchmarks: {meta.get('mode')} run, {meta.get('date')}")
    print(f"machine: {meta.get('nproc')} cores, {meta.get('cpu')}, kernel {meta.get('kernel')}, load average at the end {meta.get('loadavg')}")
    print(f"{meta.get('swift')}; {meta.get('bwrap')}; commit {meta.get('commit')}")
    print(f"{rounds} interleaved rounds; wall = fork to reaped; cpu = user+system of the process tree (wait4)")
    print("spread: [p25–p75] of the samples; ratios and differences: median of per-round values [p25–p75], 95% CI of that median")
    print()

    labels = {
        "extrun": "extrun handle make-uppercase.json (release CLI, sandboxed)",
        "extrun-unsandboxed": "  same, policy: seccomp off, no namespaces",
        "driver": "plugdrive → MakeUppercase (minimal C host, no sandbox)",
        "driver-bwrap": "plugdrive → bwrap → MakeUppercase (pid+ipc ns, seccomp)",
        "bare-swift-x2": "2 × bare start, trivial Swift (Foundation, dynamic)",
        "bare-swift-static": "1 × bare start, same, -static-stdlib (context)",
        "bare-c": "1 × bare start, empty C program (context)",
        "extrun-version": "extrun --version (process start + CLI root)",
        "extrun-no-handler": "extrun handle no-handler.json (stops after the catalog)",
        "scripts-extrun": "Scripts/extrun handle … (debug build, up to date)",
        "debug-extrun": "  .build/debug/extrun handle … (what it execs)",
    }
    print("1+2. Whole commands (ms)")
    rows = []
    for name in labels:
        if name not in samples:
            continue
        w, c = walls(name), cpus(name)
        # bwrap's outer process does not reap the sandboxed processes, so their CPU is not in its rusage.
        cpu = "n/a*" if name == "driver-bwrap" else fmt(statistics.median(c))
        rows.append([labels[name], fmt(statistics.median(w)), f"{fmt(quantile(w, .25))}–{fmt(quantile(w, .75))}",
                     fmt(min(w)), cpu])
    print(table(["command", "wall p50", "[p25–p75]", "min", "cpu p50"], rows))
    print("  * bwrap's outer process does not reap the sandboxed processes: their CPU time is not in its rusage")
    for name, count in dropped.items():
        print(f"  ! {name}: {count} failed run(s) left out (see Scripts/bench: a shared checkout re-staged plugins?)")
    print()

    # 1. Cold dispatch.
    print("1. Cold dispatch")
    cold = ratio("extrun", "bare-swift-x2")
    print(f"  extrun / 2 bare Swift starts        = {describe(cold, '×')}")
    print(f"  extrun / plugdrive (host vs floor)  = {describe(ratio('extrun', 'driver'), '×')}")
    print(f"  extrun − plugdrive (host's own cost) = {describe(diff('extrun', 'driver'), ' ms', 1)}")
    print(f"  plugdrive / 2 bare Swift starts     = {describe(ratio('driver', 'bare-swift-x2'), '×')}")
    cold_m = statistics.median(cold)
    lo, hi = median_ci(cold)
    verdicts.append(("cold dispatch ≤ 1.5 × two bare Swift starts",
                     cold_m <= TARGET_COLD_RATIO, f"{cold_m:.2f}× (95% CI {lo:.2f}–{hi:.2f})"))
    if "scripts-extrun" in samples:
        over = diff("scripts-extrun", "debug-extrun")
        print(f"  Scripts/extrun − the binary it runs  = {describe(over, ' ms', 1)}")
        m = statistics.median(over)
        lo, hi = median_ci(over)
        note = " (sources changed during the run: a sample included a rebuild)" if meta.get("script_rebuilt") == "1" else ""
        verdicts.append((f"Scripts/extrun adds ≤ {TARGET_SCRIPT_MS:.0f} ms (build up to date)", m <= TARGET_SCRIPT_MS,
                         f"{m:.1f} ms (95% CI {lo:.1f}–{hi:.1f}){note}"))
    else:
        print("  Scripts/extrun: not measured in this run (debug build out of date in --quick, or Scripts/bootstrap failed)")
        verdicts.append(("Scripts/extrun adds ≤ 5 ms", None, "not measured in this run"))
    print()

    if "extrun-version" in samples and "extrun-no-handler" in samples:
        def cpu_diff(a, b):
            rounds = sorted(set(samples[a]) & set(samples[b]))
            return statistics.median(samples[a][r][1] - (samples[b][r][1] if b else 0) for r in rounds)
        start = statistics.median(cpus("bare-swift-x2")) / 2
        version = statistics.median(cpus("extrun-version"))
        print("  Where the time goes (cpu ms of the process tree, medians of per-round differences):")
        rows = [
            ["a bare Swift process start (bare-swift-x2 / 2)", fmt(start)],
            ["extrun --version: extrun's own start + the CLI's root command", fmt(version)],
            ["  of which more than a bare Swift start", fmt(version - start)],
            ["handle up to the catalog lookup (no-handler − version):", fmt(cpu_diff("extrun-no-handler", "extrun-version"))],
            ["  subcommand parsing, intent file, policy, catalog, JSON output", ""],
            ["launch, conversation, plugin, exit (extrun − no-handler)", fmt(cpu_diff("extrun", "extrun-no-handler"))],
            ["  the plugin itself, run by the minimal driver (driver)", fmt(statistics.median(cpus("driver")))],
            ["host's total beyond the plugin (extrun − driver)", fmt(cpu_diff("extrun", "driver"))],
        ]
        print("\n".join("    " + line for line in table(["", "cpu ms"], rows).splitlines()))
    print()

    # 2. Sandbox.
    print("2. Sandbox cost (same harness, same rounds)")
    ex = diff("extrun", "extrun-unsandboxed")
    bw = diff("driver-bwrap", "driver")
    print(f"  extrun sandbox on − off              = {describe(ex, ' ms', 1)}")
    print(f"  bwrap − direct (plugdrive)           = {describe(bw, ' ms', 1)}")
    print(f"  extrun on / off                      = {describe(ratio('extrun', 'extrun-unsandboxed'), '×')}")
    # CPU time is disturbed less than wall time by a busy machine (docs/benchmarks.md, "The
    # sandbox's cost bisected"); bwrap's cannot be compared (its outer process does not reap).
    cpu_rounds = sorted(set(samples["extrun"]) & set(samples["extrun-unsandboxed"]))
    cpu_ex = [samples["extrun"][r][1] - samples["extrun-unsandboxed"][r][1] for r in cpu_rounds]
    print(f"  extrun sandbox on − off, cpu (context) = {describe(cpu_ex, ' ms', 1)}")
    print(f"  bwrap / direct                       = {describe(ratio('driver-bwrap', 'driver'), '×')}")
    dispatch = json.load(open(os.path.join(d, "dispatch.json")))
    ds = dispatch["samplesUs"]
    inproc = {}
    if "unsandboxed" in ds:
        for variant in ("sandboxed", "seccomp-only", "namespaces-only"):
            if variant in ds:
                n = min(len(ds[variant]), len(ds["unsandboxed"]))
                inproc[variant] = [(ds[variant][i] - ds["unsandboxed"][i]) / 1000 for i in range(n)]
        print("  in process (Host.handle, no CLI start), minus the unsandboxed policy:")
        for variant, values in inproc.items():
            print(f"    {variant:<16}                 = {describe(values, ' ms', 1)}")
    ex_m, bw_m = statistics.median(ex), statistics.median(bw)
    verdicts.append(("sandbox overhead ≤ bubblewrap's", ex_m <= bw_m,
                     f"extrun {ex_m:.1f} ms vs bwrap {bw_m:.1f} ms"
                     + (f"; in process {statistics.median(inproc['sandboxed']):.1f} ms" if "sandboxed" in inproc else "")))
    print()

    # 3. In-process dispatch.
    print("3. In-process dispatch through the host library (one process)")
    warm_path = os.path.join(d, "warm.json")
    if os.path.exists(warm_path):
        warm = json.load(open(warm_path))
        print("  Warm: PluginPool.handle in a loop, one caller; the plugin process is started once and runs")
        print("  every intent as a new session (docs/protocol.md §15): prepare, then one `session` request")
        print("  (resolve, confirm, handle in one exchange over the pipes).")
        rows = []
        for variant, v in sorted(warm["variants"].items()):
            s = v["summary"]
            rows.append([variant, s["count"], fmt(v["intentsPerSecond"], 0), fmt(s["p50Us"], 1), fmt(s["p90Us"], 1),
                         fmt(s["p99Us"], 1), f"{v['launches']}/{v['reuses']}"])
        print(table(["policy", "intents", "intents/s", "p50 µs", "p90 µs", "p99 µs", "launches/reuses"], rows))
        print(f"  library host over the warm run: RSS {warm['rssBeforeKB'] / 1024:.1f} → {warm['rssAfterKB'] / 1024:.1f} MiB, "
              f"peak {warm['peakRSSKB'] / 1024:.1f} MiB")
        pinned_path = os.path.join(d, "warm-pinned.json")
        if os.path.exists(pinned_path):
            p = json.load(open(pinned_path))["variants"]["sandboxed"]
            print(f"  context: host and plugin pinned to one CPU (taskset -c 0; no cross-CPU wake-ups): "
                  f"{p['intentsPerSecond']:,.0f} intents/s, p50 {p['summary']['p50Us']:.0f} µs, p99 {p['summary']['p99Us']:.0f} µs")
        for parallel_path in sorted(glob.glob(os.path.join(d, "parallel-*.json"))):
            p = json.load(open(parallel_path))
            print(f"  context: one pool, {p['callers']} callers at once ({p['variant']}, {p['launches']} warm processes): "
                  f"{p['intentsPerSecond']:,.0f} intents/s, p50 {p['summary']['p50Us']:.0f} µs, p99 {p['summary']['p99Us']:.0f} µs")
        sandboxed = warm["variants"].get("sandboxed") or next(iter(warm["variants"].values()))
        mcp_path = os.path.join(d, "mcp.json")
        if os.path.exists(mcp_path):
            m = json.load(open(mcp_path))
            inproc_p50, inproc_p99 = sandboxed["summary"]["p50Us"], sandboxed["summary"]["p99Us"]
            print(f"  MCP: a warm tool call over `extrun mcp`'s stdio, timed by a plain client ({m['count']} calls): "
                  f"p50 {m['p50Us']:.0f} µs, p99 {m['p99Us']:.0f} µs; the warm in-process call above: p50 {inproc_p50:.0f} µs, "
                  f"p99 {inproc_p99:.0f} µs; the MCP layer (JSON-RPC lines, a thread per call, the client's pipes): "
                  f"+{m['p50Us'] - inproc_p50:.0f} µs at p50")
        verdicts.append((f"in-process dispatch with a warm plugin ≥ {TARGET_WARM_PER_SECOND:,} intents/s",
                         sandboxed["intentsPerSecond"] >= TARGET_WARM_PER_SECOND,
                         f"{sandboxed['intentsPerSecond']:,.0f} intents/s (p50 {sandboxed['summary']['p50Us']:.0f} µs)"))
        print()
    print("  Cold: Host.handle in a loop: every call starts a new plugin process (no CLI start).")
    rows = []
    for variant, s in sorted(dispatch["summary"].items()):
        rows.append([variant, s["count"], fmt(s["perSecond"], 1), fmt(s["p50Us"] / 1000, 1), fmt(s["p90Us"] / 1000, 1),
                     fmt(s["p99Us"] / 1000, 1)])
    print(table(["policy", "intents", "intents/s", "p50 ms", "p90 ms", "p99 ms"], rows))
    exchange = json.load(open(os.path.join(d, "exchange.json")))
    print()
    print("  Framing + JSON encode/decode, both sides, no I/O (ExtrunBench exchange):")
    rows = []
    for name, s in [("one exchange (any method)", exchange["perExchange"]),
                    ("one intent step by step (4 exchanges)", exchange["perIntent"])] + \
            [(f"  {m}", exchange["perMethod"][m]) for m in ("initialize", "resolve", "confirm", "handle") if m in exchange["perMethod"]] + \
            ([("one warm intent (1 session exchange)", exchange["perSession"])] if "perSession" in exchange else []):
        rows.append([name, s["count"], fmt(s["perSecond"], 0), fmt(s["p50Us"], 1), fmt(s["p90Us"], 1), fmt(s["p99Us"], 1)])
    print(table(["", "count", "per second", "p50 µs", "p90 µs", "p99 µs"], rows))
    print()

    print("4. Store")
    store_path = os.path.join(d, "store.json")
    if os.path.exists(store_path):
        store = json.load(open(store_path))
        rows = []
        for name in ("set", "get"):
            st = store[name]
            rows.append([f"globals {name}", st["count"], fmt(st["perSecond"], 0), fmt(st["p50Us"], 1), fmt(st["p99Us"], 1)])
        print("  Globals through the store library (SQLite via GRDB, AES-GCM per owner), 32-byte values, one at a time:")
        print(table(["", "count", "per second", "p50 µs", "p99 µs"], rows))
    else:
        print("  globals get/set: not measured in this run")
    migration_path = os.path.join(d, "migration.txt")
    if os.path.exists(migration_path):
        m = dict(line.rstrip("\n").split("=", 1) for line in open(migration_path) if "=" in line)
        count = int(m.get("globals", "0"))
        seconds = float(m.get("seconds", "nan"))
        peak_mb = float(m.get("maxrss_kb", "nan")) / 1000
        cpu = float(m.get("user", "nan")) + float(m.get("system", "nan"))
        print(f"  extrun migrate --from OLD --to NEW of {count:,} globals (32-byte values): {seconds:.1f} s wall, "
              f"{cpu:.1f} s CPU, peak RSS {peak_mb:.1f} MB (GNU time), load average before {m.get('loadavg', '?')}")
        if count >= 1_000_000:
            verdicts.append((f"migration of 1,000,000 globals < {TARGET_MIGRATION_SECONDS:.0f} s and < {TARGET_MIGRATION_MB:.0f} MB",
                             seconds < TARGET_MIGRATION_SECONDS and peak_mb < TARGET_MIGRATION_MB,
                             f"{seconds:.1f} s, {peak_mb:.1f} MB"))
        else:
            verdicts.append(("migration of 1,000,000 globals", None, f"--quick migrates {count:,} ({seconds:.1f} s, {peak_mb:.1f} MB); the full run does 1,000,000"))
    print()

    print("5. Memory (extrun handle's metrics, median of runs)")
    runs = [json.load(open(os.path.join(d, "memory", f))) for f in sorted(os.listdir(os.path.join(d, "memory")))]
    metrics = [r.get("metrics", {}) for r in runs]

    def mib(key):
        values = [m[key] for m in metrics if key in m]
        return f"{statistics.median(values) / 1048576:.1f} MiB" if values else "n/a"

    print(f"  host peak RSS (metrics.hostPeakRSSBytes)          {mib('hostPeakRSSBytes')}")
    print(f"  plugin peak private memory (metrics.peakMemoryBytes) {mib('peakMemoryBytes')}")
    print(f"  plugin peak RSS (metrics.peakRSSBytes)            {mib('peakRSSBytes')}")
    print(f"  library host after {dispatch['rounds'] * len(ds)} Host.handle calls: RSS {dispatch['rssBeforeKB'] / 1024:.1f} → "
          f"{dispatch['rssAfterKB'] / 1024:.1f} MiB, peak {dispatch['peakRSSKB'] / 1024:.1f} MiB")
    print()

    flood_dir = os.path.join(d, "flood")
    if os.path.isdir(flood_dir):
        print("6. The host under a flood (extrun handle's peak RSS from wait4, host and plugin; median of runs)")

        def peak(prefix):
            values = []
            for f in sorted(os.listdir(flood_dir)):
                if f.startswith(prefix + "-") and f.endswith(".time"):
                    fields = dict(line.strip().split("=", 1) for line in open(os.path.join(flood_dir, f)) if "=" in line)
                    if "maxrss_kb" in fields:
                        values.append(int(fields["maxrss_kb"]) / 1024)
            return statistics.median(values) if values else None

        idle = peak("idle")
        worst = None
        for name, label in [("idle", "ordinary run (MakeUppercase)"), ("FloodUnread", "requests, answers never read"),
                            ("FloodNames", "1 MB method names until the deadline (3 s)"),
                            ("FloodNested", "200,000 zeros 500 arrays deep (report)")]:
            value = peak(name)
            print(f"  {label:<48} {value:.1f} MiB" if value is not None else f"  {label:<48} n/a")
            if name != "idle" and value is not None:
                worst = value if worst is None else max(worst, value)
        if idle is not None and worst is not None:
            verdicts.append(("host peak RSS under the worst flood < idle + 64 MiB", worst < idle + 64,
                             f"{worst:.1f} MiB, idle {idle:.1f} MiB"))
        print()

    serve_commands = os.path.join(d, "serve-commands.tsv")
    if os.path.exists(serve_commands):
        print("7. extrun serve (docs/serve.md)")
        served = defaultdict(dict)
        for line in open(serve_commands):
            name, rnd, wall, cpu, rss = line.rstrip("\n").split("\t")
            if int(wall) >= 0:
                served[name][int(rnd)] = int(wall) / 1000
        rounds = sorted(set(served["served"]) & set(served["driver"]))
        if rounds:
            ratios = [served["served"][r] / served["driver"][r] for r in rounds]
            served_p50 = statistics.median(served["served"].values())
            driver_p50 = statistics.median(served["driver"].values())
            cold_p50 = statistics.median(served["extrun"].values()) if served["extrun"] else float("nan")
            print(f"  extrun handle --server (warm plugin)   p50 {served_p50:.2f} ms")
            print(f"  C driver, plugin started cold          p50 {driver_p50:.2f} ms")
            print(f"  extrun handle (cold, same rounds)      p50 {cold_p50:.2f} ms")
            for other, label in [("served-env", "EXTRUN_SERVER=... extrun handle FILE"), ("served-parsed", "handle --server ... --format json (ArgumentParser)")]:
                if served[other]:
                    print(f"  {label:<38} p50 {statistics.median(served[other].values()):.2f} ms")
            print(f"  served / driver (paired rounds)        {statistics.median(ratios):.2f}x over {len(rounds)} rounds")
            verdicts.append(("extrun handle --server p50 <= 0.4x the C driver cold", statistics.median(ratios) <= 0.4,
                             f"{statistics.median(ratios):.2f}x ({served_p50:.2f} vs {driver_p50:.2f} ms)"))

        def serveload(name):
            path = os.path.join(d, name)
            if not os.path.exists(path):
                return None, None
            lines = open(path).read().splitlines()
            load = lines[0].partition("=")[2] if lines and lines[0].startswith("loadavg=") else "?"
            result = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else None
            return result, load

        def cpu(row):
            # serveload -p: the CPU per measured intent of the service, its descendants, the client.
            if row.get("serviceCpuUsPerIntent", -1) < 0:
                return ""
            plugins = f", its plugins {row['descendantsCpuUsPerIntent']:.0f} µs" if row["descendantsCpuUsPerIntent"] > 0 else ""
            return f"; CPU per intent: service {row['serviceCpuUsPerIntent']:.0f} µs{plugins}, client {row['clientCpuUsPerIntent']:.0f} µs"

        throughput, load = serveload("serve-throughput.txt")
        if throughput:
            print(f"  8 clients: {throughput['perSecond']:,.0f} intents/s over {throughput['intents']:,} "
                  f"(p50 {throughput['p50us']} µs, p99 {throughput['p99us']} µs, failures {throughput['failures']}; load average {load}{cpu(throughput)})")
            verdicts.append(("8 concurrent clients >= 10,000 intents/s", throughput["perSecond"] >= 10000,
                             f"{throughput['perSecond']:,.0f}/s, p99 {throughput['p99us']} µs"))
        quiet, load = serveload("serve-throughput-nodonate.txt")
        if quiet:
            print(f"  8 clients, not donating (?donate=false): {quiet['perSecond']:,.0f} intents/s "
                  f"(p50 {quiet['p50us']} µs, p99 {quiet['p99us']} µs, failures {quiet['failures']}; load average {load}{cpu(quiet)})")
        # The same 8 callers through PluginPool.handle in one process, measured right after:
        # the host's core path on this machine now, and the service's rows as a share of it.
        def pool(name):
            path = os.path.join(d, name)
            return json.load(open(path)) if os.path.exists(path) else None
        for label, row, served_row in [("donating", pool("serve-pool.json"), throughput),
                                       ("not donating", pool("serve-pool-nodonate.json"), quiet)]:
            if row:
                share = f"; the service did {served_row['perSecond'] / row['intentsPerSecond']:.2f}x of it" if served_row else ""
                print(f"  in process, 8 callers, {label}: {row['intentsPerSecond']:,.0f} intents/s "
                      f"(p50 {row['summary']['p50Us']:.0f} µs, p99 {row['summary']['p99Us']:.0f} µs){share}")
        # The floor: the service's listener answering with the service's own bytes, no intent
        # behind it (Benchmarks/HTTPFloor), then with each request handed to a worker thread and back.
        for name, label in [("serve-floor.txt", "the listener alone, a fixed answer"),
                            ("serve-floor-hop.txt", "the listener and a worker thread hop")]:
            floor, load = serveload(name)
            if floor:
                share = f"; the service, not donating, did {quiet['perSecond'] / floor['perSecond']:.2f}x of it" if quiet else ""
                print(f"  floor, {label} (ExtrunHTTPFloor): {floor['perSecond']:,.0f} requests/s "
                      f"(p50 {floor['p50us']} µs, p99 {floor['p99us']} µs, failures {floor['failures']}{cpu(floor)}){share}")
        rss, load = serveload("serve-rss.txt")
        if rss and rss["rssStartBytes"] > 0:
            start, end = rss["rssStartBytes"] / 1048576, rss["rssEndBytes"] / 1048576
            print(f"  service RSS over {rss['intents']:,} intents: {start:.1f} → {end:.1f} MiB (load average {load})")
            flat = end <= start * 1.1 + 4
            if rss["intents"] >= 1_000_000:
                verdicts.append(("service RSS flat over 1,000,000 intents (<= +10% + 4 MiB)", flat, f"{start:.1f} → {end:.1f} MiB"))
            else:
                verdicts.append(("service RSS flat over 1,000,000 intents", None,
                                 f"--quick runs {rss['intents']:,}: {start:.1f} → {end:.1f} MiB; the full run does 1,000,000"))
        print()

    print("Targets")
    for what, ok, detail in verdicts:
        mark = "----" if ok is None else ("PASS" if ok else "MISS")
        print(f"  {mark}  {what}: {detail}")
    print(f"(run took {meta.get('seconds')} s including builds)")


if __name__ == "__main__":
    main()
