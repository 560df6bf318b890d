#!/usr/bin/env python3
"""A warm tool call over `extrun mcp`'s stdio, timed by the client (Scripts/bench, section 3).

Starts `extrun mcp --no-donate` (the in-process row does not donate either), initializes, calls MakeUppercase `--warmup` times (the plugin
process is started once and kept warm by the server's pool), then times `--count`
calls: from writing the `tools/call` line to reading its result line. A plain
client (the standard library only, newline-delimited JSON on pipes, answers read
through a buffer), so that the
figure is the server's round trip and not an SDK's: the MCP layer's cost is this
minus the warm in-process figure (PluginPool.handle) of the same run.
Prints JSON: {"count", "p50Us", "p90Us", "p99Us", "meanUs", "perSecond"}.
"""

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import time


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--extrun", required=True)
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--donate", action="store_true", help="donate each call, as a user's server does (default: not, as the in-process row)")
    parser.add_argument("--tool", default="MakeUppercase", help="the tool to call with {\"text\": \"hello world\"} (default MakeUppercase; ShoutText is the Python example's)")
    args = parser.parse_args()

    server = subprocess.Popen([args.extrun, "mcp"] + ([] if args.donate else ["--no-donate"]), stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
    # Answers read through a buffer (stdin stays unbuffered: each request is one write). A
    # raw pipe's readline() reads one byte per read(2), ~200 system calls an answer, which
    # timed the client (~135 µs) rather than the server.
    out = io.BufferedReader(server.stdout, 65536)
    next_id = [0]

    def request(method, params):
        next_id[0] += 1
        line = json.dumps({"jsonrpc": "2.0", "id": next_id[0], "method": method, "params": params}).encode() + b"\n"
        began = time.perf_counter_ns()
        server.stdin.write(line)
        while True:
            answer = json.loads(out.readline())
            if answer.get("id") == next_id[0]:
                return answer, (time.perf_counter_ns() - began) // 1000

    request("initialize", {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}})
    server.stdin.write(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
    call = {"name": args.tool, "arguments": {"text": "hello world"}}
    for _ in range(args.warmup):
        answer, _ = request("tools/call", call)
        if "error" in answer or answer["result"].get("isError"):
            sys.exit("the warm-up call failed: " + json.dumps(answer))
    times = []
    end = time.monotonic() + args.seconds
    while len(times) < args.count and time.monotonic() < end:
        answer, us = request("tools/call", call)
        if "error" in answer or not answer["result"].get("structuredContent", {}).get("result", "").startswith("HELLO WORLD"):
            sys.exit("a timed call failed: " + json.dumps(answer))
        times.append(us)
    server.stdin.close()
    server.wait(timeout=30)
    times.sort()

    def pct(p):
        return times[min(len(times) - 1, int(p * len(times)))]

    print(json.dumps({"count": len(times), "p50Us": pct(0.5), "p90Us": pct(0.9), "p99Us": pct(0.99),
                      "meanUs": statistics.mean(times), "perSecond": 1e6 / statistics.mean(times)}))


if __name__ == "__main__":
    main()
