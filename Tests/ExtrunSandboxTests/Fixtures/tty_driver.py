#!/usr/bin/env python3
"""Runs a command on a new pseudo-terminal, as a person at a terminal would, and
types a line on it while the command runs.

Usage: tty_driver.py TYPED COMMAND [ARGS...]
Prints JSON: {"transcript": what the terminal showed, "status": the exit status}.
"""
import json
import os
import pty
import select
import sys
import termios
import time

typed, command = sys.argv[1], sys.argv[2:]
pid, master = pty.fork()
if pid == 0:
    os.execv(command[0], command)
# Type the line at once: it waits in the terminal's input queue for whoever reads it.
time.sleep(0.3)
os.write(master, typed.encode() + b"\n")
transcript = b""
while True:
    ready, _, _ = select.select([master], [], [], 0.2)
    if ready:
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        transcript += chunk
    else:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            break
else:
    pass
try:
    _, status = os.waitpid(pid, 0)
except ChildProcessError:
    pass
print(json.dumps({"transcript": transcript.decode(errors="replace"),
                  "status": os.waitstatus_to_exitcode(status)}))
