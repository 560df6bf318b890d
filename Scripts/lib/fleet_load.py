"""Load for Scripts/fleet check: CLIENTS threads, each sending CALLS IncrementGlobalVariable
intents (`POST /v1/handle`) through the balancer, one at a time on its own connection, and
counting what was acknowledged (200 with the plugin's answer) and what failed, by status or
by what the connection did. Then one GetGlobalVariable. Prints one JSON object:

  {"acknowledged": N, "failed": {"502": 1, "connection: ...": 2}, "failureMessages": {KEY: the first one's message}, "value": V,
   "latencyMs": {"p50": ..., "p99": ..., "max": ...}, "seconds": S, "perSecond": R,
   "calls": [[START, END, OK], ...]}

START and END are each call's wall-clock times (time.time()), OK whether it was acknowledged.
Usage: python3 fleet_load.py URL TOKEN_FILE CLIENTS CALLS NAME
CALLS is a number per client, until=PATH: each client calls until PATH exists, or for=SECONDS;
either way no call starts after FLEET_LOAD_MAX_SECONDS (default 120).
FLEET_LOAD_INTENT=MakeUppercase: the clients call MakeUppercase with NAME as its text instead
(it keeps nothing: "value" is then null).
Standard library only (it runs on the system's python3).
"""

import http.client
import json
import sys
import threading
import time
import urllib.parse


def call(url, token, body, timeout=60):
    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    try:
        connection.request("POST", "/v1/handle", body=json.dumps(body), headers={"Authorization": "Bearer " + token})
        response = connection.getresponse()
        data = response.read()
        try:
            return response.status, json.loads(data or b"{}")
        except ValueError:
            # Not extrun's answer: the balancer's own error page (a 502 for a host that died mid-call).
            return response.status, {"report": {"error": {"kind": "(the balancer's page)"}}}
    finally:
        connection.close()


def main():
    url, token_file, clients, calls, name = sys.argv[1:6]
    token = open(token_file).read().strip()
    lock = threading.Lock()
    acknowledged = 0
    failed = {}
    latencies = []
    timeline = []
    examples = {}

    import itertools
    import os

    # However the hosts behave, the load ends within FLEET_LOAD_MAX_SECONDS (120) plus one
    # call's timeout: no new call starts after it.
    deadline = time.monotonic() + float(os.environ.get("FLEET_LOAD_MAX_SECONDS", "120"))

    def more(sent):
        if time.monotonic() > deadline:
            return False
        if calls.startswith("until="):
            return not os.path.exists(calls[len("until="):])
        if calls.startswith("for="):
            return time.monotonic() < began + float(calls[len("for="):])
        return sent < int(calls)

    def client():
        nonlocal acknowledged
        for sent in itertools.count():
            if not more(sent):
                break
            started, wall = time.monotonic(), time.time()
            try:
                status, answer = call(url, token, body)
                ok = status == 200 and answer.get("exitStatus") == 0
                report = answer.get("report") or {}
                kind = (report.get("error") or {}).get("kind") or ((report.get("response") or {}).get("failure") or {}).get("code", "")
                error = report.get("error") or {}
                message = (error.get("message") or "")[:300]
                # A plugin's failure after a store failure names the store's (error.store.kind).
                store_kind = (error.get("store") or {}).get("kind") if isinstance(error.get("store"), dict) else None
                if store_kind:
                    kind = "%s (store: %s)" % (kind, store_kind)
                key = None if ok else ("%d %s" % (status, kind) if answer.get("exitStatus") in (None, 0) or status != 200 else "%d exit %s %s" % (status, answer.get("exitStatus"), kind)).strip()
            except (OSError, http.client.HTTPException, ValueError) as error:
                ok, key, message = False, "connection: %s" % type(error).__name__, str(error)[:300]
            elapsed = (time.monotonic() - started) * 1000
            with lock:
                latencies.append(elapsed)
                timeline.append([round(wall, 3), round(wall + elapsed / 1000, 3), ok])
                if ok:
                    acknowledged += 1
                else:
                    failed[key] = failed.get(key, 0) + 1
                    examples.setdefault(key, message)

    if os.environ.get("FLEET_LOAD_INTENT") == "MakeUppercase":
        body = {"intent": "MakeUppercase", "parameters": {"text": name}}
    else:
        body = {"intent": "IncrementGlobalVariable", "parameters": {"name": name}}
    began = time.monotonic()
    threads = [threading.Thread(target=client) for _ in range(int(clients))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds = time.monotonic() - began
    try:
        if body["intent"] == "IncrementGlobalVariable":
            status, answer = call(url, token, {"intent": "GetGlobalVariable", "parameters": {"name": name}})
        else:
            status, answer = None, {}
    except (OSError, http.client.HTTPException) as error:
        status, answer = "connection: %s" % type(error).__name__, {}
    value = (((answer.get("report") or {}).get("response") or {}).get("properties") or {}).get("value")
    latencies.sort()

    def percentile(p):
        return round(latencies[min(len(latencies) - 1, int(p * len(latencies)))], 1) if latencies else None

    print(json.dumps({
        "acknowledged": acknowledged,
        "failed": failed,
        "failureMessages": examples,
        "value": value,
        "readStatus": status,
        "latencyMs": {"p50": percentile(0.5), "p99": percentile(0.99), "max": round(latencies[-1], 1) if latencies else None},
        "seconds": round(seconds, 2),
        "perSecond": round(acknowledged / seconds, 1) if seconds > 0 else None,
        "calls": sorted(timeline),
    }))


if __name__ == "__main__":
    main()
