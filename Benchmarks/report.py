#!/usr/bin/env python3
"""Turns the raw samples of one Scripts/bench run into the report (stdout) and
RESULTS_DIR/summary.json.

Usage: Benchmarks/report.py RESULTS_DIR

RESULTS_DIR holds commands.tsv and serve-commands.tsv (Benchmarks/harness/benchrun.c),
dispatch.json, warm.json, parallel-*.json, serve-pool*.json, store-*.json, donate-*.json and
exchange.json (ExtrunBench), store-migration-*.txt and pgbench.txt (the store on SQLite and
PostgreSQL, and pgbench on the same server), mcp.json (Benchmarks/mcp/roundtrip.py),
serve-*.txt (Benchmarks/harness/serveload.c), migration.txt (GNU time of extrun
migrate), memory/*.json (extrun handle's output), flood/*.time and meta.txt.
Times are wall-clock milliseconds unless a column says cpu.

Ratios and differences of two whole commands are computed per round (the
commands of one round ran back to back, so a busy moment slows them alike) and
then summarized by their median; [a–b] is the interquartile range of the
per-round values, and "95% CI" is a bootstrap confidence interval of that
median.

The verdicts come from one table, TARGETS below: each row names what it
measures as an expression over the run's rows (see `evaluate`), its goal (a
number, or another expression over the same run), and how the two compare.
summary.json holds every row's name, value, goal and pass, and the raw rows
each value came from. A new target is a new row of the table.
"""
import glob
import json
import os
import random
import statistics
import sys
from collections import defaultdict

# --- The targets --------------------------------------------------------------
# An expression is a number, a reference to a measured row, or (op, expr, expr...)
# with op one of "/", "-", "+", "*", "max". References:
#   "cmd:NAME"           a whole command of commands.tsv: its wall ms, per round
#   "cmd@FILE:NAME"      the same from another benchrun file (serve-commands.tsv)
#   "FILE:KEY.KEY..."    a number in FILE: a JSON file, a serveload file (its last
#                        line, JSON) or a key=value file (migration.txt)
#   "flood:NAME"         the median peak RSS (MiB) of flood/NAME-*.time
# "/" and "-" of two commands of the same file are taken per round, and their
# median is the value (with its [p25–p75] and 95% CI); anything else is taken of
# the medians or numbers. `when` (optional): [(expr, op, number)...] that must hold for
# the row to be judged (the full run's sizes); `unit`: how the value reads; `goalName`:
# what a measured goal is, in words. `bound` (optional): the value a design that added
# nothing beyond a floor of the same run would reach, with `boundName` saying which floor;
# the report prints it beside the value, and summary.json says whether it meets the goal
# (`boundMeetsGoal`): when it does not, no amount of trimming passes the row.
#   36.1: the C driver under bubblewrap + seccomp, per round, over the driver alone.
#   36.3: the MCP client and its pipes with a server that answers at once (floor.c).
#   36.4: with in-process rate R and floor rate F (both CPUs busy in each), an intent that
#         costs the in-process CPU plus a floor request's (server and client) runs at
#         1 / (1/R + 1/F), which is F / (R + F) of R.
WARM_P50 = "warm.json:variants.sandboxed.summary.p50Us"
# The service's own listener answering 8 clients with a worker thread hop and no intent
# (Benchmarks/HTTPFloor --hop): requests/s.
HOP_FLOOR = "serve-floor-hop.txt:perSecond"
TARGETS = [
    # Issue 36: ratios against floors measured in the same run.
    {"id": "36.1", "group": "issue 36", "name": "cold `extrun handle` / C driver cold",
     "value": ("/", "cmd:extrun", "cmd:driver"), "op": "<=", "goal": 1.5, "unit": "×",
     "bound": ("/", "cmd:driver-bwrap", "cmd:driver"), "boundName": "a host costing only bubblewrap's sandbox"},
    {"id": "36.2", "group": "issue 36", "name": "sandbox on − off ≤ bubblewrap + seccomp − driver",
     "value": ("-", "cmd:extrun", "cmd:extrun-unsandboxed"), "op": "<=",
     "goal": ("-", "cmd:driver-bwrap", "cmd:driver"), "goalName": "bwrap + seccomp − driver, same rounds", "unit": "ms"},
    {"id": "36.3", "group": "issue 36", "name": "MCP stdio warm p50 − in-process warm p50",
     "value": ("-", "mcp.json:p50Us", WARM_P50), "op": "<=", "goal": 60, "unit": "µs",
     "bound": "mcp-floor.json:p50Us", "boundName": "the client and its pipes alone (floor.c's server)"},
    {"id": "36.4a", "group": "issue 36", "name": "serve, 8 clients, not donating / in process not donating",
     "value": ("/", "serve-throughput-nodonate.txt:perSecond", "serve-pool-nodonate.json:intentsPerSecond"),
     "op": ">=", "goal": 0.75, "unit": "×",
     "bound": ("/", HOP_FLOOR, ("+", "serve-pool-nodonate.json:intentsPerSecond", HOP_FLOOR)),
     "boundName": "a service adding only its listener and the hop to a worker"},
    {"id": "36.4b", "group": "issue 36", "name": "serve, 8 clients, donating / in process donating",
     "value": ("/", "serve-throughput.txt:perSecond", "serve-pool.json:intentsPerSecond"),
     "op": ">=", "goal": 0.85, "unit": "×",
     "bound": ("/", HOP_FLOOR, ("+", "serve-pool.json:intentsPerSecond", HOP_FLOOR)),
     "boundName": "a service adding only its listener and the hop to a worker"},
    {"id": "36.5", "group": "issue 36", "name": "in process, 8 callers: donating / not donating",
     "value": ("/", "serve-pool.json:intentsPerSecond", "serve-pool-nodonate.json:intentsPerSecond"),
     "op": ">=", "goal": 0.6, "unit": "×"},
    # Issue 33: a warm modern (2026-07-28) MCP tools/call over HTTP against the same intent
    # served at /v1 (what `extrun handle --server` sends), by the same C client; as context,
    # each as a whole curl command.
    {"id": "33.http", "group": "issue 33", "name": "warm MCP tools/call over HTTP p50 / the same intent at /v1/handle p50 (one C client)",
     "value": ("/", "serve-one-mcp.txt:p50us", "serve-one-v1.txt:p50us"), "op": "<=", "goal": 1.5, "unit": "×"},
    {"id": "33.http-curl", "group": "other", "name": "MCP tools/call over HTTP / the same intent at /v1/handle, each one curl command",
     "value": ("/", "cmd@serve-commands.tsv:mcp-http", "cmd@serve-commands.tsv:v1-curl"), "op": "<=", "goal": 1.5, "unit": "×"},
    # Bounds of earlier issues that are not throughput (memory, the served command, the script).
    {"id": "served", "group": "other", "name": "`extrun handle --server` (warm) / C driver cold",
     "value": ("/", "cmd@serve-commands.tsv:served", "cmd@serve-commands.tsv:driver"), "op": "<=", "goal": 0.4, "unit": "×"},
    {"id": "script", "group": "other", "name": "Scripts/extrun − the binary it runs (debug build up to date)",
     "value": ("-", "cmd:scripts-extrun", "cmd:debug-extrun"), "op": "<=", "goal": 5, "unit": "ms"},
    {"id": "flood", "group": "other", "name": "host peak RSS under the worst flood",
     "value": ("max", "flood:FloodUnread", "flood:FloodNames", "flood:FloodNested"), "op": "<",
     "goal": ("+", "flood:idle", 64), "goalName": "an ordinary run's + 64 MiB", "unit": "MiB"},
    {"id": "serve-rss", "group": "other", "name": "the service's RSS after 1,000,000 intents ≤ start + 10% + 4 MiB",
     "value": ("/", "serve-rss.txt:rssEndBytes", 1048576), "op": "<=",
     "goal": ("+", ("*", ("/", "serve-rss.txt:rssStartBytes", 1048576), 1.1), 4), "goalName": "start × 1.1 + 4 MiB", "unit": "MiB",
     "when": [("serve-rss.txt:intents", ">=", 1_000_000), ("serve-rss.txt:rssStartBytes", ">", 0)]},
    {"id": "migration-time", "group": "other", "name": "extrun migrate of 1,000,000 globals: wall time",
     "value": "migration.txt:seconds", "op": "<", "goal": 20, "unit": "s", "when": [("migration.txt:globals", ">=", 1_000_000)]},
    {"id": "migration-memory", "group": "other", "name": "extrun migrate of 1,000,000 globals: peak RSS",
     "value": ("/", "migration.txt:maxrss_kb", 1000), "op": "<", "goal": 200, "unit": "MB",
     "when": [("migration.txt:globals", ">=", 1_000_000)]},
]
# Rows later issues add (issue 34: the store on SQLite and on PostgreSQL beside pgbench) are
# rows of this table over the files their parts of Scripts/bench write.


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


class Unmeasured(Exception):
    """A row the expression needs is not in this run."""


class Run:
    """The raw rows of one results folder, as the target expressions read them."""

    def __init__(self, d):
        self.d = d
        self.commands = {}  # file -> name -> round -> (wall ms, cpu ms)
        self.used = {}  # reference -> its raw row(s), for summary.json

    def series(self, file, name):
        """name's wall ms per round in the benchrun file `file`."""
        if file not in self.commands:
            table = defaultdict(dict)
            path = os.path.join(self.d, file)
            if os.path.exists(path):
                for line in open(path):
                    cmd, rnd, wall, cpu, _rss = line.rstrip("\n").split("\t")
                    if int(wall) >= 0:
                        table[cmd][int(rnd)] = (int(wall) / 1000, int(cpu) / 1000)
            self.commands[file] = table
        rows = self.commands[file].get(name)
        if not rows:
            raise Unmeasured(f"{name} in {file}")
        self.used[f"cmd@{file}:{name}"] = {"file": file, "command": name,
                                            "rounds": [[r, w, c] for r, (w, c) in sorted(rows.items())],
                                            "columns": ["round", "wall ms", "cpu ms"]}
        return {r: w for r, (w, _c) in rows.items()}

    def number(self, ref):
        if ref.startswith("flood:"):
            name = ref.partition(":")[2]
            values = []
            for path in sorted(glob.glob(os.path.join(self.d, "flood", f"{name}-*.time"))):
                fields = dict(line.strip().split("=", 1) for line in open(path) if "=" in line)
                if "maxrss_kb" in fields:
                    values.append(int(fields["maxrss_kb"]) / 1024)
            if not values:
                raise Unmeasured(ref)
            self.used[ref] = {"file": f"flood/{name}-*.time", "maxrssMiB": values}
            return statistics.median(values)
        file, _, key = ref.partition(":")
        path = os.path.join(self.d, file)
        if not os.path.exists(path):
            raise Unmeasured(file)
        text = open(path).read()
        if file.endswith(".json"):
            row = json.loads(text)
        else:
            lines = text.splitlines()
            if lines and lines[-1].startswith("{"):  # serveload: key=value lines, then its JSON
                row = json.loads(lines[-1])
            else:
                row = {k: v for k, _, v in (line.partition("=") for line in lines if "=" in line)}
        value = row
        parent = row
        for part in key.split("."):
            if not isinstance(value, dict) or part not in value:
                raise Unmeasured(ref)
            parent, value = value, value[part]
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise Unmeasured(f"{ref} is not a number ({value!r})")
        # The raw row: the object holding the number, without sample arrays.
        self.used[ref] = {"file": file, "key": key, "value": number,
                          "row": {k: v for k, v in parent.items() if not isinstance(v, (list, dict))}}
        return number


def command_ref(expr):
    """(file, name) when expr names a whole command of a benchrun file."""
    if isinstance(expr, str) and expr.startswith("cmd"):
        head, _, name = expr.partition(":")
        return (head.partition("@")[2] or "commands.tsv", name)
    return None


def evaluate(run, expr):
    """(value, per-round values or None) of a target expression."""
    if isinstance(expr, (int, float)):
        return float(expr), None
    if isinstance(expr, str):
        ref = command_ref(expr)
        if ref:
            return statistics.median(run.series(*ref).values()), None
        return run.number(expr), None
    op, *args = expr
    refs = [command_ref(a) for a in args]
    if op in ("/", "-") and len(args) == 2 and all(refs) and refs[0][0] == refs[1][0]:
        a, b = run.series(*refs[0]), run.series(*refs[1])
        rounds = sorted(set(a) & set(b))
        if not rounds:
            raise Unmeasured(f"no round with both {args[0]} and {args[1]}")
        values = [a[r] / b[r] if op == "/" else a[r] - b[r] for r in rounds]
        return statistics.median(values), values
    values = [evaluate(run, a)[0] for a in args]
    if op == "max":
        return max(values), None
    a, b = values
    return {"/": a / b, "-": a - b, "+": a + b, "*": a * b}[op], None


def show(expr):
    if isinstance(expr, (int, float)):
        return f"{int(expr)}" if float(expr).is_integer() else f"{expr:g}"
    if isinstance(expr, str):
        return expr
    op, *args = expr
    return f"{op}({', '.join(show(a) for a in args)})" if op == "max" else "(" + f" {op} ".join(show(a) for a in args) + ")"


COMPARE = {"<=": lambda a, b: a <= b, "<": lambda a, b: a < b, ">=": lambda a, b: a >= b, ">": lambda a, b: a > b}


def judge(run, target):
    """One row of TARGETS judged on `run`: its summary.json entry (and `text` for the report)."""
    run.used = {}
    out = {"id": target["id"], "group": target["group"], "name": target["name"], "unit": target.get("unit", ""),
           "comparison": target["op"], "expression": show(target["value"]), "goalExpression": show(target["goal"]),
           "goalName": target.get("goalName"),
           "value": None, "goal": None, "pass": None}
    unit = out["unit"]
    digits = 3 if unit == "×" else 2 if unit == "ms" else 1 if unit in ("MiB", "MB", "s") else 0
    try:
        for expr, op, bound in target.get("when", []):
            have = evaluate(run, expr)[0]
            if not COMPARE[op](have, bound):
                out["note"] = f"not judged: {show(expr)} = {show(have)} (judged when {op} {show(bound)}: the full run)"
        value, per_round = evaluate(run, target["value"])
        goal, goal_rounds = evaluate(run, target["goal"])
    except Unmeasured as missing:
        out["note"] = f"not measured in this run ({missing})"
        out["rows"] = run.used
        out["text"] = out["note"]
        return out
    out["value"], out["goal"] = round(value, 4), round(goal, 4)
    if "note" not in out:
        out["pass"] = COMPARE[target["op"]](value, goal)
    text = f"{value:.{digits}f} {unit} (goal {target['op']} {goal:.{digits}f} {unit}"
    text += ")" if isinstance(target["goal"], (int, float)) else f": {show(target['goal'])})"
    for key, values in (("perRound", per_round), ("goalPerRound", goal_rounds)):
        if values:
            lo, hi = median_ci(values)
            out[key] = {"rounds": len(values), "p25": round(quantile(values, .25), 4), "p75": round(quantile(values, .75), 4),
                        "ci95": [round(lo, 4), round(hi, 4)]}
    if per_round:
        text += f" [{fmt(quantile(per_round, .25), digits)}–{fmt(quantile(per_round, .75), digits)}], 95% CI {fmt(median_ci(per_round)[0], digits)}–{fmt(median_ci(per_round)[1], digits)}"
    if "bound" in target:
        try:
            bound, _ = evaluate(run, target["bound"])
        except Unmeasured:
            bound = None
        if bound is not None:
            meets = COMPARE[target["op"]](bound, goal)
            out.update({"bound": round(bound, 4), "boundExpression": show(target["bound"]), "boundName": target["boundName"],
                        "boundMeetsGoal": meets})
            text += f"; {target['boundName']}: {bound:.{digits}f} {unit}" + ("" if meets else ", itself beyond the goal")
    if "note" in out:
        text += f"; {out['note']}"
    out["rows"] = run.used
    out["text"] = text
    return out


def key_values(path):
    """A key=value file (migration.txt, pgbench.txt) as a dict; None when it is not there."""
    if not os.path.exists(path):
        return None
    return {k: v for k, _, v in (line.rstrip("\n").partition("=") for line in open(path)) if k}


def store_rows(d):
    """Issue 34's rows: the store's operations on SQLite and on PostgreSQL side by side, and
    pgbench's simple-update rate on the same server (the floor). Each row keeps its raw numbers
    (for summary.json) and their text (for the report and docs/benchmarks.md)."""
    def load(name):
        path = os.path.join(d, name)
        return json.load(open(path)) if os.path.exists(path) else None

    def latency(summary):
        if not summary:
            return None, "not measured"
        raw = {k: summary[k] for k in ("count", "perSecond", "p50Us", "p90Us", "p99Us") if k in summary}
        return raw, f"{summary['p50Us']:,.0f} µs p50, {summary['p99Us']:,.0f} p99 ({summary['perSecond']:,.0f}/s)"

    rows = []
    stores = {b: load(f"store-{b}.json") for b in ("sqlite", "pg")}
    donations = {b: load(f"donate-{b}.json") for b in ("sqlite", "pg")}
    for op, name in (("set", "globals set"), ("get", "globals get")):
        row = {"id": f"store.{op}", "name": f"{name}, one at a time"}
        for backend, key in (("sqlite", "sqlite"), ("pg", "postgres")):
            row[key], row[key + "Text"] = latency((stores[backend] or {}).get(op))
        rows.append(row)
    row = {"id": "store.donation", "name": "a donation (one caller)"}
    for backend, key in (("sqlite", "sqlite"), ("pg", "postgres")):
        row[key], row[key + "Text"] = latency((donations[backend] or {}).get("summary"))
    rows.append(row)
    count = None
    row = {"id": "store.migrate", "name": "extrun migrate of N globals"}
    for backend, key in (("sqlite", "sqlite"), ("pg", "postgres")):
        m = key_values(os.path.join(d, f"store-migration-{backend}.txt"))
        if m is None:
            row[key], row[key + "Text"] = None, "not measured"
            continue
        count = int(m.get("globals", "0"))
        if m.get("built") != "1":
            row[key] = {"globals": count, "built": False, "probeError": m.get("probeError", "")}
            row[key + "Text"] = "not built yet (`extrun migrate` on one global failed)"
            continue
        seconds = float(m["seconds"])
        row[key] = {"globals": count, "built": True, "seconds": seconds, "cpuSeconds": float(m["user"]) + float(m["system"]),
                    "maxrssKB": int(m["maxrss_kb"]), "perSecond": count / seconds if seconds > 0 else None}
        row[key + "Text"] = f"{seconds:.1f} s ({count / seconds:,.0f} globals/s), {int(m['maxrss_kb']) / 1000:.0f} MB peak" if seconds > 0 else f"{seconds} s"
    if count:
        row["name"] = f"extrun migrate of {count:,} globals"
    rows.append(row)
    for r in rows:
        a, b = r.get("sqlite"), r.get("postgres")
        if a and b and "p50Us" in a and a["p50Us"] > 0:
            r["ratio"] = round(b["p50Us"] / a["p50Us"], 2)
            r["ratioText"] = f"{r['ratio']:.1f}× (p50)"
        elif a and b and a.get("seconds") and b.get("seconds"):
            r["ratio"] = round(b["seconds"] / a["seconds"], 2)
            r["ratioText"] = f"{r['ratio']:.1f}× (time)"
        else:
            r["ratioText"] = ""
    floor = key_values(os.path.join(d, "pgbench.txt"))
    if floor and floor.get("tps"):
        tps, lat = float(floor["tps"]), float(floor.get("latencyMs", "nan"))
        rows.append({"id": "store.pgbench", "name": "floor: pgbench -N (simple-update), 1 client",
                     "sqlite": None, "postgres": {"tps": tps, "latencyMs": lat, "seconds": float(floor.get("seconds", "nan")),
                                                  "transactions": int(floor.get("transactions", "0")), "protocol": floor.get("protocol")},
                     "sqliteText": "", "postgresText": f"{lat * 1000:,.0f} µs mean ({tps:,.0f} transactions/s)", "ratioText": ""})
    elif os.path.exists(os.path.join(d, "store-postgres.txt")):
        rows.append({"id": "store.pgbench", "name": "floor: pgbench -N (simple-update), 1 client", "sqlite": None, "postgres": None,
                     "sqliteText": "", "postgresText": "not measured", "ratioText": ""})
    if not any(r.get("sqlite") or r.get("postgres") for r in rows):
        rows = []
    server = key_values(os.path.join(d, "store-postgres.txt")) or {}
    return {"server": server.get("server"), "rows": rows}


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
    if "scripts-extrun" in samples:
        over = diff("scripts-extrun", "debug-extrun")
        print(f"  Scripts/extrun − the binary it runs  = {describe(over, ' ms', 1)}")
        if meta.get("script_rebuilt") == "1":
            print("  (sources changed during the run: a Scripts/extrun sample included a rebuild)")
    else:
        print("  Scripts/extrun: not measured in this run (debug build out of date in --quick, or Scripts/bootstrap failed)")
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
                  f"p99 {inproc_p99:.0f} µs; the MCP layer (JSON-RPC lines, the call's dispatch, the client's pipes): "
                  f"+{m['p50Us'] - inproc_p50:.0f} µs at p50")
            floor_path = os.path.join(d, "mcp-floor.json")
            if os.path.exists(floor_path):
                f = json.load(open(floor_path))
                print(f"    its floor, the same client against a C server answering each line at once (Benchmarks/mcp/floor.c, "
                      f"{f['count']} calls): p50 {f['p50Us']:.0f} µs, p99 {f['p99Us']:.0f} µs; beyond it and the in-process call, "
                      f"extrun mcp adds {m['p50Us'] - inproc_p50 - f['p50Us']:+.0f} µs at p50")
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
    store = store_rows(d)
    if store["rows"]:
        print(f"  The store library on SQLite (GRDB, the file) and on PostgreSQL ({store.get('server', '?')}, a Unix socket, fsync on),")
        print("  one caller, 32-byte values; the floor: pgbench's simple-update on the same server:")
        print(table(["", "SQLite", "PostgreSQL", "PostgreSQL / SQLite"], [
            [r["name"], r["sqliteText"], r["postgresText"], r["ratioText"]] for r in store["rows"]]))
    else:
        print("  globals get/set, donation, migration on SQLite and PostgreSQL: not measured in this run")
    migration_path = os.path.join(d, "migration.txt")
    if os.path.exists(migration_path):
        m = dict(line.rstrip("\n").split("=", 1) for line in open(migration_path) if "=" in line)
        count = int(m.get("globals", "0"))
        seconds = float(m.get("seconds", "nan"))
        peak_mb = float(m.get("maxrss_kb", "nan")) / 1000
        cpu = float(m.get("user", "nan")) + float(m.get("system", "nan"))
        print(f"  extrun migrate --from OLD --to NEW of {count:,} globals (32-byte values): {seconds:.1f} s wall, "
              f"{cpu:.1f} s CPU, peak RSS {peak_mb:.1f} MB (GNU time), load average before {m.get('loadavg', '?')}")
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

        for name, label in [("idle", "ordinary run (MakeUppercase)"), ("FloodUnread", "requests, answers never read"),
                            ("FloodNames", "1 MB method names until the deadline (3 s)"),
                            ("FloodNested", "200,000 zeros 500 arrays deep (report)")]:
            value = peak(name)
            print(f"  {label:<48} {value:.1f} MiB" if value is not None else f"  {label:<48} n/a")
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
        print()

    judged = [judge(Run(d), target) for target in TARGETS]
    print("Targets (Benchmarks/report.py, TARGETS; all in summary.json)")
    for group in dict.fromkeys(t["group"] for t in judged):
        print(f"  {group}:")
        for t in (t for t in judged if t["group"] == group):
            mark = "----" if t["pass"] is None else ("PASS" if t["pass"] else "MISS")
            print(f"    {mark}  {t['id']:<16} {t['name']}: {t['text']}")
    summary = {
        "date": meta.get("date"), "mode": meta.get("mode"), "commit": meta.get("commit"),
        "user": meta.get("user"), "uid": int(meta["uid"]) if meta.get("uid", "").isdigit() else None,
        "loadavg": meta.get("loadavg"), "loadavgStart": meta.get("loadavg_start"),
        "nproc": meta.get("nproc"), "cpu": meta.get("cpu"), "kernel": meta.get("kernel"),
        "swift": meta.get("swift"), "bwrap": meta.get("bwrap"), "seconds": meta.get("seconds"),
        "targets": [{k: v for k, v in t.items() if k != "text"} for t in judged],
        "store": {k: v for k, v in store.items() if k != "rows"} | {
            "rows": [{k: v for k, v in r.items() if not k.endswith("Text")} for r in store["rows"]]},
    }
    with open(os.path.join(d, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1, ensure_ascii=False)
        f.write("\n")
    issue = [t for t in judged if t["group"] == "issue 36"]
    print(f"  issue 36: {sum(1 for t in issue if t['pass'])} of its {len(issue)} rows pass (target 4 is two rows); "
          f"summary: {os.path.join(d, 'summary.json')}")
    print(f"(run took {meta.get('seconds')} s including builds)")


if __name__ == "__main__":
    main()
