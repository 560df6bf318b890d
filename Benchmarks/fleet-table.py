#!/usr/bin/env python3
"""Writes the numbers of one or more fleet checks (`Scripts/fleet check --json FILE`, or the
check.json it leaves in .build/fleet-check-logs) as a Markdown table: one row per figure, one
column per check.

Usage: Benchmarks/fleet-table.py [--write FILE] CHECK.json...

Without --write it prints the table. With --write it replaces the text between the lines
`<!-- fleet-table:begin -->` and `<!-- fleet-table:end -->` of FILE (docs/benchmarks.md), so
that the figures there are the checks' own, never typed by hand.
"""
import json
import sys

import markdown_section



def get(check, *path):
    value = check
    for key in path:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def rate(check, name):
    value = get(check, "results", "throughput", name, "perSecond")
    return "n/a" if value is None else f"{value:,.1f}/s"


def ratio(check):
    one = get(check, "results", "throughput", "oneHostInFleet", "perSecond")
    alone = get(check, "results", "throughput", "aloneSQLite", "perSecond")
    if not one or not alone:
        return "n/a"
    return f"**{one / alone:.2f}×**"


def latency(check, step):
    p50, p99, top = (get(check, "results", step, "latencyMs", key) for key in ("p50", "p99", "max"))
    if p99 is None:
        return "n/a"
    return f"p50 {p50:,.0f} ms, **p99 {p99:,.0f} ms**, max {top:,.0f} ms"


def calls(check, step):
    result = get(check, "results", step)
    if not result:
        return "n/a"
    failed = result.get("failed") or {}
    failures = ", ".join(f"{count} `{kind}`" for kind, count in sorted(failed.items())) or "none"
    counter = result.get("value")
    text = f"{result['acknowledged']:,} acknowledged, failed: {failures}"
    if counter is not None:
        text += f"; the counter {counter:,}"
    return text


def seconds(value):
    return "n/a" if value is None else f"{value:.2f} s"


def recovery(check):
    result = get(check, "results", "pgRestart")
    if not result:
        return "n/a"
    return (f"**{seconds(result.get('recoverySeconds'))}** (first acknowledged call {seconds(result.get('firstAcknowledgedAfterStartSeconds'))}; "
            f"the server down {seconds(result.get('downSeconds'))})")


def verdict(check):
    timing = f" ({'--short, ' if check.get('short') else ''}{check.get('seconds')} s)"
    if check.get("passed"):
        return "passed" + timing
    failures = check.get("failures", [])
    shown = "; ".join(failure if len(failure) <= 160 else failure[:157] + "..." for failure in failures[:3])
    more = f"; and {len(failures) - 3} more" if len(failures) > 3 else ""
    return f"**FAILED**{timing}: {shown}{more}"


def messages(check, step):
    found = get(check, "results", step, "failureMessages")
    if found is None:
        return "not recorded"
    return "; ".join(f"`{kind}`: {text[:160]}" for kind, text in sorted(found.items())) or "none"


def migrate(check):
    result = get(check, "results", "migrate")
    if not result:
        return "n/a"
    during, after, switch = result["during"], result["after"], result["switch"]
    failed = sum((during.get("failed") or {}).values()) + sum((after.get("failed") or {}).values())
    reads = ", ".join(f"{host} {value}" for host, value in sorted(result["reads"].items()))
    return (f"{during['acknowledged']:,} increments while `migrate --remove-source` ran (exit {result['firstRun']['exit']}, "
            f"kept {result['firstRun']['kept']}), again after (exit {result['secondRun']['exit']}, overwritten {result['secondRun']['overwritten']}); "
            f"{switch['acknowledged']:,} calls during the switch, failed {sum((switch.get('failed') or {}).values())}; "
            f"{after['acknowledged']:,} increments after, {failed} failed; each host reads **{reads}**")


ROWS = [
    ("the check", verdict),
    ("one host in the fleet: HAProxy + PostgreSQL, 8 clients (the others in maintenance)", lambda c: rate(c, "oneHostInFleet")),
    ("the same host alone: straight, its own SQLite, 8 clients", lambda c: rate(c, "aloneSQLite")),
    ("one host in the fleet / alone on SQLite", ratio),
    ("the whole fleet through HAProxy, 8 clients", lambda c: rate(c, "fleet")),
    ("a host SIGKILLed under 8 clients: latency", lambda c: latency(c, "kill")),
    ("a host SIGKILLed under 8 clients: calls", lambda c: calls(c, "kill")),
    ("PostgreSQL stopped at once under 8 clients: recovered after its start", recovery),
    ("PostgreSQL stopped at once: calls", lambda c: calls(c, "pgRestart")),
    ("PostgreSQL stopped at once: latency", lambda c: latency(c, "pgRestart")),
    ("PostgreSQL stopped at once: what a failed call said (the first of each kind)", lambda c: messages(c, "pgRestart")),
    ("a rolling restart under 8 clients: calls", lambda c: calls(c, "rolling")),
    ("a rolling restart: latency", lambda c: latency(c, "rolling")),
    ("a change of owner under 8 clients (EXAMPLETEAM to FLEETNEW)", migrate),
]


def table(paths):
    checks = [json.load(open(path)) for path in paths]
    lines = []
    for number, (path, check) in enumerate(zip(paths, checks), 1):
        lines.append(
            f"- check {number}: `Scripts/fleet check{' --short' if check.get('short') else ''}`, {check.get('date')}, commit {check.get('commit')}, "
            f"{check.get('build')} build, {check.get('hosts')} hosts ({check.get('network')}), store {check.get('store')}, "
            f"{check.get('cpus')} cores, load average {check.get('loadAverageAtEnd')} at the end; `{path}`")
    lines.append("")
    lines.append("| figure | " + " | ".join(f"check {n}" for n in range(1, len(checks) + 1)) + " |")
    lines.append("|---|" + "---|" * len(checks))
    for name, cell in ROWS:
        lines.append(f"| {name} | " + " | ".join(cell(check) for check in checks) + " |")
    return "\n".join(lines) + "\n"



if __name__ == "__main__":
    markdown_section.main("fleet-table", table, __doc__)
