#!/usr/bin/env python3
"""Where the CPU of cold `extrun handle` runs goes, per process and per part of the host.

Usage:
  perf record -e cpu-clock -F 20000 -g -o perf.data -- sh -c 'for i in $(seq 40); do
    EXTRUN_HOME=H EXTRUN_PLUGIN_PATH=P extrun handle INTENT > /dev/null; done'
  perf script -i perf.data --show-task-events -F comm,pid,tid,time,ip,sym > script.txt
  Benchmarks/coldpath/attribute.py script.txt RUNS [HZ]

Prints CPU milliseconds per run (samples / RUNS / HZ). A process's role comes from who
forked it: the host (an extrun whose parent is not one), the supervisor (the host's fork),
the pid namespace's first process (the supervisor's fork) and the plugin (its fork; before
its execve it still runs extrun's code, setting up Landlock, seccomp and the rest). A host
sample goes to the first part, in the order below, that a function of its call chain names;
beside that, the Swift runtime's type lookups are counted across all parts.
"""
import re
import sys
from collections import Counter, defaultdict

# (part, substrings of a frame's symbol), first match wins.
HOST_PARTS = [
    ("process exit: unmapping the host", ("do_exit", "do_group_exit", "exit_mmap")),
    ("launch: the fork of the supervisor, waiting for its set-up", ("PluginProcessC6launch", "extrun_sandbox_spawn", "_Fork")),
    ("signature check and private copy (PluginVerification)", ("PluginVerification", "PluginSignature", "PluginCopies")),
    ("catalog (PluginCatalog)", ("PluginCatalog",)),
    ("donation (Host.donate)", ("6donate_",)),
    ("launch: scratch directory, credentials, Landlock rules, cgroup (PluginSession.launch)", ("PluginSessionC6launch",)),
    ("conversation: initialize, resolve, confirm, handle (IntentLifecycle)", ("IntentLifecycle", "PluginConnection")),
    ("teardown (Teardown, waitForExit)", ("Teardown", "waitForExit", "closeAndWait")),
    ("store opened ahead (PendingStore, another thread)", ("PendingStore", "StoreDatabase", "sqlite3")),
    ("seccomp programs built (SeccompFilters, another thread)", ("SeccompFilters", "seccomp_export", "seccomp_rule_add", "extrun_seccomp")),
    ("report written (HandleReport, JSONWriter)", ("HandleReport", "JSONWriter", "Output")),
    ("prepare: policy, limits, scratch directory, the rest of Host.prepare", ("Host0B0V7prepare", "Host0B0V8prepared", "ScratchDirectory", "SandboxSettings")),
    ("CLI: HandleFastPath (intent file, options)", ("HandleFastPath",)),
]
RUNTIME = [
    ("Swift runtime: types by mangled name (swift_getTypeByMangledName)", ("swift_getTypeByMangledName", "instantiateConcreteTypeFromMangledName")),
    ("Swift runtime: protocol conformance lookups (swift_conformsToProtocol)", ("swift_conformsToProtocol",)),
    ("kernel: page faults", ("asm_exc_page_fault",)),
]


def parse(path):
    parent = {}
    samples = []
    current = None
    for line in open(path, errors="replace"):
        if "PERF_RECORD_FORK(" in line:
            m = re.search(r"PERF_RECORD_FORK\((\d+):(\d+)\):\((\d+):(\d+)\)", line)
            child, ptgid = int(m.group(1)), int(m.group(3))
            if child != ptgid:  # a new process, not a thread
                parent[child] = ptgid
            continue
        if "PERF_RECORD" in line:
            continue
        m = re.match(r"^\s*(.+?)\s+(\d+)/(\d+)\s+[0-9.]+:\s*$", line)
        if m:
            current = {"comm": m.group(1), "pid": int(m.group(2)), "tid": int(m.group(3)), "frames": []}
            samples.append(current)
            continue
        if current is not None and line.startswith("\t"):
            parts = line.strip().split(None, 1)
            current["frames"].append(parts[1] if len(parts) > 1 else "")
    return parent, samples


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    path, runs = sys.argv[1], int(sys.argv[2])
    hz = float(sys.argv[3]) if len(sys.argv) > 3 else 20000.0
    parent, samples = parse(path)
    comm_of = {}
    for s in samples:
        comm_of.setdefault(s["pid"], set()).add(s["comm"])

    def role(pid):
        chain = []
        p = pid
        while p in parent and len(chain) < 6:
            chain.append(p)
            p = parent[p]
        # The host is the first extrun in the chain up from the loop's shell.
        extrun_chain = [q for q in reversed([pid] + chain[1:]) if q in parent]
        depth = 0
        p = pid
        while p in parent and parent[p] in comm_of and ({"extrun", "MakeUppercase"} & comm_of.get(parent[p], set())):
            depth += 1
            p = parent[p]
        return ["host", "supervisor", "pid 1 of the namespace", "plugin"][min(depth, 3)] if extrun_chain or depth else "host"

    ms = 1000.0 / hz / runs
    by_role = Counter()
    host_parts = Counter()
    runtime = Counter()
    plugin_parts = Counter()
    for s in samples:
        if s["comm"] in ("loop.sh", "sh", "seq", "perf-exec"):
            continue
        r = role(s["pid"])
        frames = s["frames"]
        joined = "\n".join(frames)
        if r == "plugin":
            if s["comm"] != "MakeUppercase" and not any("MakeUppercase" in c for c in comm_of.get(s["pid"], ())):
                r = "plugin"
            kind = "after execve" if s["comm"] != "extrun" else "before execve (extrun's code: Landlock, seccomp, rlimits)"
            by_role[f"plugin, {kind}"] += 1
            if s["comm"] != "extrun":
                where = ("dynamic loader (ld.so)" if "_dl_" in joined or "dl_main" in joined or "do_lookup" in joined
                         else "kernel: execve" if "execve" in joined
                         else "kernel: page faults" if "asm_exc_page_fault" in joined
                         else "kernel: exit" if "do_exit" in joined or "exit_mmap" in joined
                         else "Swift runtime (conformances, metadata)" if "swift_conformsToProtocol" in joined or "MangledName" in joined
                         else "the rest (SDK, Foundation, the intent)")
                plugin_parts[where] += 1
            continue
        by_role[r] += 1
        if r != "host":
            continue
        part = next((name for name, keys in HOST_PARTS if any(k in f for f in frames for k in keys)), "process start and the rest")
        host_parts[part + ("" if s["tid"] == s["pid"] else "  [another thread]")] += 1
        for name, keys in RUNTIME:
            if any(k in f for f in frames for k in keys):
                runtime[name] += 1

    total = sum(by_role.values())
    print(f"CPU per run: {total * ms:.1f} ms ({len(samples)} samples, {runs} runs, {hz:.0f} Hz)")
    print("\nBy process:")
    for name, n in by_role.most_common():
        print(f"  {n * ms:6.2f} ms  {name}")
    print("\nThe host, by part (first match of its call chain):")
    for name, n in host_parts.most_common():
        print(f"  {n * ms:6.2f} ms  {name}")
    print("\nThe host, across parts:")
    for name, n in runtime.most_common():
        print(f"  {n * ms:6.2f} ms  {name}")
    print("\nThe plugin after its execve:")
    for name, n in plugin_parts.most_common():
        print(f"  {n * ms:6.2f} ms  {name}")


if __name__ == "__main__":
    main()
