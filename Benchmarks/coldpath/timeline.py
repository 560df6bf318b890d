#!/usr/bin/env python3
"""The phases of one cold `extrun handle`, from a `perf trace` of it.

Usage:
  EXTRUN_HOME=H EXTRUN_PLUGIN_PATH=P perf trace --syscalls -e sched:sched_process_fork -o TRACE \\
    -- extrun handle INTENT > /dev/null

A trace of every system call doubles the run's time (perf trace's own cost per call) but
names the files, so the host's part splits into the intent, the catalog and the rest. A
trace of only the calls the phases are read from costs far less:
  perf trace --syscalls -e $(Benchmarks/coldpath/timeline.py --calls) -e sched:sched_process_fork ...
  Benchmarks/coldpath/timeline.py TRACE...

With several traces it prints each phase's median (and min–max) over them.
Every phase is read from system calls alone (perf trace's timestamps, no
symbols): which process made them tells the host, the supervisor (the host's
fork that sets up the namespaces), the pid namespace's first process, and the
plugin (before and after its execve). docs/benchmarks.md, "The cold path,
attributed", explains the phases.
"""
import re
import statistics
import sys

LINE = re.compile(r"^\s*(?P<t>[0-9.]+|\?) \(\s*(?P<d>[0-9.]*)(?: ms)?\s*\): (?P<comm>.*?)/(?P<pid>\d+) (?P<rest>.*)$")


SCRIPT = re.compile(r"^\s*(?P<comm>.+?)\s+(?P<pid>\d+)\s+\[\d+\]\s+(?P<t>[0-9.]+):\s+(?P<event>[\w:]+):\s*(?P<args>.*)$")


def script_events(lines):
    """`perf script` of a `perf record` of tracepoints (the quieter way, --record): the same events."""
    out = []
    start = None
    for raw in lines:
        m = SCRIPT.match(raw)
        if not m:
            continue
        t = float(m["t"]) * 1000
        start = t if start is None else start
        event, args = m["event"], m["args"]
        if event == "sched:sched_process_fork":
            f = re.search(r"pid=(\d+) child_comm=.* child_pid=(\d+)", args)
            rest = f"sched_process_fork(parent_pid: {f.group(1)} child_pid: {f.group(2)} )"
            call = "sched:sched_process_fork"
        elif event == "sched:sched_process_exec":
            call, rest = "execve", "execve()"
        elif event == "sched:sched_process_exit":
            call, rest = "sched_process_exit", "sched_process_exit()"
        elif event.startswith("syscalls:sys_"):
            call = event.split("sys_enter_" if "sys_enter_" in event else "sys_exit_", 1)[1]
            fd = re.match(r"fd: 0x0*([0-9a-f]+)", args)
            rest = f"{call}(fd: {int(fd.group(1), 16)}, {args})" if fd else f"{call}({args})"
        else:
            continue
        out.append({"t": t - start, "d": 0.0, "comm": m["comm"], "pid": int(m["pid"]), "call": call, "rest": rest,
                    "continued": False})
    return out


def events(path):
    text = open(path, errors="replace").read().splitlines()
    if any(SCRIPT.match(line) for line in text[:5]):
        return script_events(text)
    out = []
    for raw in text:
        m = LINE.match(raw)
        if not m:
            continue
        t = None if m["t"] == "?" else float(m["t"])
        d = float(m["d"]) if m["d"] else 0.0
        rest = m["rest"]
        continued = "[continued]:" in rest
        call = re.search(r"\[continued\]: (\w+)\(" if continued else r"^(\w+)\(", rest)
        out.append({"t": t, "d": d, "comm": m["comm"], "pid": int(m["pid"]), "call": call.group(1) if call else "",
                    "rest": rest, "continued": continued})
    return out


def phases(path):
    ev = events(path)
    host = ev[0]["pid"]

    def returned_pid(e):
        m = re.search(r"= (\d+)", e["rest"])
        return int(m.group(1)) if m else None

    timed = [e for e in ev if e["t"] is not None]

    def first(pred, after=0.0):
        return next((e for e in timed if e["t"] >= after and pred(e)), None)

    def last(pred, before=float("inf")):
        found = [e for e in timed if e["t"] <= before and pred(e)]
        return found[-1] if found else None

    # Who made whom (threads too): perf trace's sched:sched_process_fork events.
    parent = {}
    for e in ev:
        if e["call"] == "sched:sched_process_fork" or "sched_process_fork(" in e["rest"]:
            m = re.search(r"parent_pid: (\d+).*child_pid: (\d+)", e["rest"])
            if m:
                parent[int(m.group(2))] = int(m.group(1))
    if not parent:
        raise SystemExit(f"{path}: no sched:sched_process_fork events (trace with: perf trace --syscalls -e sched:sched_process_fork ...)")

    def under(pid):
        """pid and every thread and process it made, and theirs."""
        found = {pid}
        grew = True
        while grew:
            more = {child for child, up in parent.items() if up in found} - found
            found |= more
            grew = bool(more)
        return found

    t0 = timed[0]["t"]
    intent = first(lambda e: e["pid"] == host and e["call"] == "read" and "/intents/" in e["rest"])
    # The plugin: the process that executes something other than extrun; its parent is the
    # pid namespace's first process, whose parent is the supervisor, the host's fork.
    execve = first(lambda e: e["call"] == "execve" and e["pid"] != host and not e["continued"] and e["t"] is not None)
    if not execve:
        raise SystemExit(f"{path}: no execve of a plugin in the trace")
    plugin = execve["pid"]
    init = parent.get(plugin)
    supervisor = parent.get(init)
    if parent.get(supervisor) != host:
        raise SystemExit(f"{path}: the plugin {plugin} is not the host's grandchild through a supervisor (a run without a pid namespace?)")

    def forked(child):
        return first(lambda e: "sched_process_fork(" in e["rest"] and f"child_pid: {child} " in e["rest"])

    forked_at = forked(supervisor)
    # The fork's own system call (copying the host's page tables) belongs to it.
    fork = last(lambda e: e["pid"] == host and e["call"] == "clone" and not e["continued"], forked_at["t"]) or forked_at
    manifests = last(lambda e: e["pid"] == host and e["call"] == "read" and "manifest.json" in e["rest"], fork["t"])
    digests = first(lambda e: e["pid"] == host and e["call"] == "read" and "plugin-digests.json" in e["rest"])
    sup_first = first(lambda e: e["pid"] == supervisor and "sched_process_fork(" not in e["rest"])
    mount_last = last(lambda e: e["pid"] == supervisor and e["call"] == "mount")
    init_first = first(lambda e: e["pid"] == init and "sched_process_fork(" not in e["rest"])
    child_first = first(lambda e: e["pid"] == plugin and "sched_process_fork(" not in e["rest"])
    landlock_first = first(lambda e: e["pid"] == plugin and e["call"].startswith("landlock"))
    landlock_end = last(lambda e: e["pid"] == plugin and e["call"] == "landlock_restrict_self")
    seccomp = first(lambda e: e["pid"] == plugin and e["call"] == "seccomp")
    threads = under(plugin)
    host_threads = under(host) - under(supervisor)
    # The plugin answers on fd 4 (docs/protocol.md); its first write there answers initialize.
    answer = first(lambda e: e["pid"] in threads and e["call"] == "write" and e["rest"].startswith("write(fd: 4"), execve["t"])
    plugin_exit = first(lambda e: e["pid"] in threads and e["call"] == "exit_group", execve["t"])
    host_exit = last(lambda e: e["pid"] in host_threads and e["call"] == "exit_group")
    syncs = [e for e in timed if e["pid"] in host_threads and e["call"] in ("fsync", "fdatasync") and e["t"] >= plugin_exit["t"]]
    # The end: the host's process gone (perf record's sched_process_exit), else its exit_group.
    host_gone = last(lambda e: e["pid"] == host and e["call"] == "sched_process_exit")
    end = host_gone["t"] if host_gone else host_exit["t"]

    def at(e, field="t"):
        return e["t"] + (e["d"] if field == "end" else 0.0)

    if intent and manifests:  # a trace of every system call: perf trace resolved the paths
        rows = [
            ("host: process start, CLI, intent file read", t0, at(intent, "end")),
            ("host: catalog (manifests read)", at(intent, "end"), at(manifests, "end")),
            ("host: signature check, copy, policy, store open-ahead and seccomp build started, scratch directory, up to the fork",
             at(manifests, "end"), fork["t"]),
        ]
    else:  # a trace of a few calls (less overhead): the host's part before the fork is one phase
        rows = [("host: process start, CLI, intent, catalog, signature check, policy, store open-ahead, scratch, up to the fork",
                 t0, fork["t"])]
    rows += [
        ("supervisor: fork of the host until the child runs", fork["t"], sup_first["t"]),
        ("supervisor: network, ipc, mount and pid namespaces and the mounts", sup_first["t"], at(mount_last, "end")),
        ("supervisor: clone of the pid namespace's first process until it runs", at(mount_last, "end"), init_first["t"]),
        ("pid 1: /proc mounted, vfork of the plugin until it runs", init_first["t"], child_first["t"]),
        ("plugin (before execve): privileges, rlimits, descriptors", child_first["t"], landlock_first["t"] if landlock_first else seccomp["t"]),
        ("plugin (before execve): Landlock", landlock_first["t"] if landlock_first else seccomp["t"], at(landlock_end, "end") if landlock_end else seccomp["t"]),
        ("plugin (before execve): seccomp program loaded, execve", at(landlock_end, "end") if landlock_end else seccomp["t"], execve["t"]),
        ("plugin: execve to its first answer (loader, Swift runtime, SDK start)", execve["t"], answer["t"] if answer else plugin_exit["t"]),
        ("conversation to the plugin's exit (resolve, confirm, handle, end)", answer["t"] if answer else plugin_exit["t"], plugin_exit["t"]),
    ]
    init_gone = first(lambda e: e["pid"] == init and e["call"] == "sched_process_exit", plugin_exit["t"])
    supervisor_gone = first(lambda e: e["pid"] == supervisor and e["call"] == "sched_process_exit", plugin_exit["t"])
    report = last(lambda e: e["pid"] in host_threads and e["call"] == "write" and e["rest"].startswith("write(fd: 1,"))
    if init_gone and supervisor_gone and report and plugin_exit["t"] <= init_gone["t"] <= supervisor_gone["t"] <= report["t"]:
        rows += [  # perf record's sched_process_exit events split the end
            ("end: the plugin's exit until pid 1 of its namespace has exited", plugin_exit["t"], init_gone["t"]),
            ("end: until the supervisor has exited", init_gone["t"], supervisor_gone["t"]),
            ("end: the host's teardown, donation commit, report written", supervisor_gone["t"], report["t"]),
            ("end: the host's exit (exit_group, its memory unmapped)", report["t"], end),
        ]
    else:
        rows.append(("host: after the plugin's exit (teardown, donation commit, report, exit)", plugin_exit["t"], end))
    out = [(name, b - a) for name, a, b in rows]
    out.append(("total (the host's first event to its exit)", end - t0))
    return out, {"digests": digests is not None, "syncsAfterExit": len(syncs)}


CALLS = ("arch_prctl,prctl,clone,clone3,execve,setns,unshare,mount,landlock_create_ruleset,landlock_add_rule,"
         "landlock_restrict_self,seccomp,write,exit_group,fsync,fdatasync")


def main():
    paths = sys.argv[1:]
    if paths == ["--calls"]:
        print(CALLS)
        return
    if not paths:
        sys.exit(__doc__)
    runs = [phases(p) for p in paths]
    names = [name for name, _ in runs[0][0]]
    width = max(len(n) for n in names)
    print(f"{'phase':<{width}}  {'ms p50':>7}  {'min–max':>13}  share")
    total = statistics.median(dict(r[0])[names[-1]] for r in runs)
    for name in names:
        values = [dict(r[0])[name] for r in runs]
        m = statistics.median(values)
        share = f"{100 * m / total:4.0f}%" if name != names[-1] else ""
        print(f"{name:<{width}}  {m:7.2f}  {min(values):6.2f}–{max(values):6.2f}  {share}")
    print(f"({len(runs)} traces; fsync/fdatasync after the plugin's exit per run: "
          f"{[r[1]['syncsAfterExit'] for r in runs]})")


if __name__ == "__main__":
    main()
