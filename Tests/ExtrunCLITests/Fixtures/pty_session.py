#!/usr/bin/env python3
"""Runs a command on a new pseudo-terminal, as a person at a terminal would, and
types answers to its questions. The command's standard output (the report) goes
to a file, so that it is not mixed with what was asked on the terminal.

Usage: pty_session.py SCRIPT_JSON STDOUT_FILE COMMAND [ARGS...]

SCRIPT_JSON is a list of [QUESTION, ANSWER]: once QUESTION has appeared on the
terminal (after the previous one), ANSWER and a newline are typed. Prints, as JSON:
the transcript of the terminal (carriage returns removed), the exit status (or
-SIGNAL), the questions that never came, and whether the command had to be killed
(it did not end within 30 s of its start).
"""
import json
import os
import pty
import select
import signal
import sys
import time

script = json.loads(sys.argv[1])
stdout_file = sys.argv[2]
command = sys.argv[3:]

pid, fd = pty.fork()
if pid == 0:
    # The child: a session of its own with the terminal as its controlling terminal and
    # as stdin and stderr (pty.fork); stdout to the file.
    out = os.open(stdout_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(out, 1)
    os.close(out)
    os.execv(command[0], command)

transcript = b""
matched_to = 0
pending = list(script)
killed = False
deadline = time.time() + 30
status = None
while True:
    if time.time() > deadline:
        os.kill(pid, signal.SIGKILL)
        killed = True
    ready, _, _ = select.select([fd], [], [], 0.1)
    if ready:
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # EIO: every process with the terminal open has closed it
            chunk = b""
        transcript += chunk
        while pending:
            question = pending[0][0].encode()
            found = transcript.find(question, matched_to)
            if found < 0:
                break
            matched_to = found + len(question)
            os.write(fd, (pending[0][1] + "\n").encode())
            pending.pop(0)
        if chunk:
            continue
    done, wait_status = os.waitpid(pid, os.WNOHANG)
    if done:
        status = os.waitstatus_to_exitcode(wait_status)
        # What it wrote last, if anything is left in the terminal.
        while select.select([fd], [], [], 0.05)[0]:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            transcript += chunk
        break
os.close(fd)
print(json.dumps({
    "transcript": transcript.decode("utf-8", "replace").replace("\r", ""),
    "status": status,
    "unanswered": [question for question, _ in pending],
    "killed": killed,
}))
