#!/usr/bin/env python3
"""Writes the store's rows of one or more Scripts/bench runs (the "store" part of their
summary.json: the store on SQLite and on PostgreSQL side by side, and pgbench's
simple-update rate on the same server) as Markdown tables, one per run.

Usage: Benchmarks/store-table.py [--write FILE] SUMMARY.json...

Without --write it prints the tables. With --write it replaces the text between the lines
`<!-- store-table:begin -->` and `<!-- store-table:end -->` of FILE (docs/benchmarks.md),
so the figures there are the runs' own, never typed by hand (as Benchmarks/summary-table.py
does for the targets).
"""
import json
import sys

import markdown_section



def who(summary):
    uid = summary.get("uid")
    if uid is None:
        return "a user not recorded"
    return "root" if uid == 0 else f"{summary.get('user') or 'uid ' + str(uid)} (an ordinary user)"


def latency(raw):
    return f"{raw['p50Us']:,.0f} µs p50, {raw['p99Us']:,.0f} p99 ({raw['perSecond']:,.0f}/s)"


def cell(row, key):
    raw = row.get(key)
    if raw is None:
        return "" if row["id"] == "store.pgbench" and key == "sqlite" else "not measured"
    if "p50Us" in raw:
        return latency(raw)
    if "built" in raw:
        if not raw["built"]:
            return "not built yet"
        per = f" ({raw['perSecond']:,.0f} globals/s)" if raw.get("perSecond") else ""
        return f"{raw['seconds']:.1f} s{per}, {raw['maxrssKB'] / 1000:.0f} MB peak"
    if "tps" in raw:
        return f"{raw['latencyMs'] * 1000:,.0f} µs mean ({raw['tps']:,.0f} transactions/s)"
    return json.dumps(raw)


def render(paths):
    lines = []
    for i, path in enumerate(paths, 1):
        s = json.load(open(path))
        store = s.get("store") or {}
        lines.append(f"Run {i}: `Scripts/bench{' --quick' if s.get('mode') == 'quick' else ''}` as {who(s)}, {s.get('date')}, "
                     f"commit {s.get('commit')}, load average {s.get('loadavgStart') or '?'} at the start and {s.get('loadavg')} "
                     f"at the end ({s.get('nproc')} cores); {store.get('server') or 'PostgreSQL'}; `{path}`")
        lines.append("")
        rows = store.get("rows") or []
        if not rows:
            lines.append("(no store rows in this run)")
            lines.append("")
            continue
        lines.append("| row | SQLite | PostgreSQL | PostgreSQL / SQLite |")
        lines.append("|---|---|---|---|")
        for row in rows:
            ratio = row.get("ratio")
            unit = "" if ratio is None else (" (time)" if row["id"] == "store.migrate" else " (p50)")
            ratio_text = "" if ratio is None else f"{ratio:.1f}×{unit}"
            lines.append(f"| {row['name']} | {cell(row, 'sqlite')} | {cell(row, 'postgres')} | {ratio_text} |")
        lines.append("")
    return "\n".join(lines)



if __name__ == "__main__":
    markdown_section.main("store-table", render, __doc__)
