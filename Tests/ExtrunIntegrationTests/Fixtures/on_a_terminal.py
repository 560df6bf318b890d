#!/usr/bin/env python3
"""Runs a command on a pseudo-terminal, answers its questions, and prints
(as JSON) what it wrote on the terminal and its exit status.
Usage: on_a_terminal.py ANSWERS_JSON COMMAND [ARGS...]"""
import json
import os
import pty
import select
import sys
import time

answers = json.loads(sys.argv[1])
pid, fd = pty.fork()
if pid == 0:
    os.execv(sys.argv[2], sys.argv[2:])
transcript = b""
deadline = time.time() + 30
while time.time() < deadline:
    ready, _, _ = select.select([fd], [], [], 0.2)
    if ready:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        transcript += chunk
        # A question ends with "? " or ": " (a prompt waiting for an answer).
        if answers and (transcript.rstrip(b" ").endswith(b"?") or transcript.endswith(b": ") or transcript.endswith(b"] ")):
            os.write(fd, (answers.pop(0) + "\n").encode())
    else:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
_, status = os.waitpid(pid, 0)
print(json.dumps({"transcript": transcript.decode("utf-8", "replace"), "status": os.waitstatus_to_exitcode(status)}))
