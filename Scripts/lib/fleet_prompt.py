"""An interactive /v1 run through the balancer, for Scripts/fleet check: MakeUppercase without
its text (`POST /v1/handle?interactive=true`), whose prompt is answered through the balancer
(`POST /v1/runs/RUN/answers`) on a second connection. Prints one JSON object:

  {"run": RUN, "answerStatus": 200 | 404 | ..., "result": "HELLO, FLEET" | null,
   "reportStatus": ..., "hostNamed": true | false}

`hostNamed`: the run id has the form HOST.UUID, which the balancer routes answers on.
A 404 answer means it reached a host that is not running the run; the run then waits for
its prompt's timeout, so the stream is closed right after (the report is not awaited).

Usage: python3 fleet_prompt.py URL TOKEN_FILE
"""

import http.client
import json
import sys
import urllib.parse


def main():
    url, token_file = sys.argv[1:3]
    token = open(token_file).read().strip()
    parts = urllib.parse.urlsplit(url)
    headers = {"Authorization": "Bearer " + token}
    stream = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    stream.request("POST", "/v1/handle?interactive=true", body=json.dumps({"intent": "MakeUppercase", "parameters": {}}), headers=headers)
    response = stream.getresponse()
    out = {"run": None, "answerStatus": None, "result": None, "reportStatus": None, "hostNamed": False}
    for line in response:
        event = json.loads(line)
        if event.get("event") == "prompt":
            out["run"] = event["run"]
            out["hostNamed"] = "." in event["run"]
            answer = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
            answer.request("POST", "/v1/runs/%s/answers" % urllib.parse.quote(event["run"]),
                           body=json.dumps({"prompt": event["prompt"], "answer": "hello, fleet"}), headers=headers)
            reply = answer.getresponse()
            reply.read()
            out["answerStatus"] = reply.status
            answer.close()
            if reply.status != 200:
                break
        elif event.get("event") == "report":
            out["reportStatus"] = event.get("status")
            out["result"] = (((event.get("report") or {}).get("response") or {}).get("properties") or {}).get("result")
            break
    stream.close()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
