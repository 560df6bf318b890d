#!/usr/bin/env python3
"""Writes the targets of one or more Scripts/bench runs (their summary.json) as a
Markdown table: one row per target, one column per run.

Usage: Benchmarks/summary-table.py [--write FILE] SUMMARY.json...

Without --write it prints the table. With --write it replaces the text between
the lines `<!-- summary-table:begin -->` and `<!-- summary-table:end -->` of FILE
(docs/benchmarks.md), so the figures there are the runs' own, never typed by hand.
"""
import json
import sys

import markdown_section



def number(value, unit):
    if value is None:
        return "n/a"
    digits = 3 if unit == "×" else 2 if unit == "ms" else 1 if unit in ("MiB", "MB", "s") else 0
    return f"{value:,.{digits}f}"


def cell(target):
    unit = target.get("unit", "")
    if target.get("value") is None:
        return "not measured"
    if target.get("pass") is None:  # measured at another size than the goal's (a --quick run)
        return "not judged (the full run's size)"
    verdict = "PASS" if target["pass"] else "**MISS**"
    text = f"{number(target['value'], unit)} {unit}".rstrip()
    if not isinstance(target.get("goalExpression"), str) or not _is_number(target["goalExpression"]):
        text += f" (goal {target['comparison']} {number(target['goal'], unit)})"
    per_round = target.get("perRound")
    if per_round:
        lo, hi = per_round["ci95"]
        text += f", 95% CI {number(lo, unit)}–{number(hi, unit)}"
    text += f": {verdict}"
    if target.get("bound") is not None:
        # What a design adding nothing beyond the run's floor would reach (Benchmarks/report.py).
        text += f"; floor bound {number(target['bound'], unit)}" + ("" if target.get("boundMeetsGoal") else " (misses too)")
    return text


def _is_number(text):
    try:
        float(text)
        return True
    except ValueError:
        return False


def goal(target):
    unit = target.get("unit", "")
    expression = target.get("goalExpression", "")
    if _is_number(expression):
        return f"{target['comparison']} {number(float(expression), unit)} {unit}".rstrip()
    return f"{target['comparison']} {target.get('goalName') or '`' + expression + '`'} (same run)"


def who(summary):
    uid = summary.get("uid")
    if uid is None:
        return "a user not recorded"
    return "root" if uid == 0 else f"{summary.get('user') or 'uid ' + str(uid)} (an ordinary user)"


def render(paths):
    runs = [json.load(open(path)) for path in paths]
    lines = []
    for i, (path, s) in enumerate(zip(paths, runs), 1):
        lines.append(f"- run {i}: `Scripts/bench{' --quick' if s.get('mode') == 'quick' else ''}` as {who(s)}, "
                     f"{s.get('date')}, commit {s.get('commit')}, load average {s.get('loadavgStart') or '?'} at the start "
                     f"and {s.get('loadavg')} at the end ({s.get('nproc')} cores), {s.get('seconds')} s; `{path}`")
    lines.append("")
    header = ["target", "goal"] + [f"run {i}" for i in range(1, len(runs) + 1)]
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|" + "---|" * len(header))
    ids = list(dict.fromkeys(t["id"] for s in runs for t in s["targets"]))
    for target_id in ids:
        per_run = [next((t for t in s["targets"] if t["id"] == target_id), None) for s in runs]
        first = next(t for t in per_run if t)
        name = f"{first['id']}: {first['name']}" if first["group"] == "issue 36" else first["name"]
        lines.append("| " + " | ".join([name, goal(first)] + [cell(t) if t else "—" for t in per_run]) + " |")
    return "\n".join(lines) + "\n"



if __name__ == "__main__":
    markdown_section.main("summary-table", render, __doc__)
