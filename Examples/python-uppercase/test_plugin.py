#!/usr/bin/env python3
"""Tests of plugin.py at the byte level, without the host:
python3 Examples/python-uppercase/test_plugin.py

Each test starts plugin.py with its protocol pipes on fds 3 and 4, as the host
does, and checks what comes back, including what the host itself never sends
(frames cut into pieces, several frames in one write, garbage)."""

import json
import os
import tempfile
import time
import unittest

# Started with a standard descriptor closed (a CI runner may give no standard input), the
# first pipe made here would be that descriptor, and a child's stdin (or stdout) redirection
# would then replace one end of it: keep 0, 1 and 2 taken.
for _fd in (0, 1, 2):
    try:
        os.fstat(_fd)
    except OSError:
        os.open(os.devnull, os.O_RDWR)  # the lowest free descriptor: this one

PLUGIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "plugin.py")


def frame(message):
    body = json.dumps(message).encode("utf-8") if not isinstance(message, bytes) else message
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def request(request_id, method, params):
    return frame({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})


INITIALIZE = request(1, "initialize", {"protocolVersion": 1, "hostVersion": "test", "mode": "extension", "intent": "ShoutText"})


class Plugin:
    """plugin.py running as a child, with fds 3 (to it) and 4 (from it)."""

    def __init__(self):
        to_read, self.to_plugin = os.pipe()
        self.from_plugin, from_write = os.pipe()
        self.stderr = tempfile.TemporaryFile()
        devnull = os.open(os.devnull, os.O_RDWR)
        self.pid = os.posix_spawn(PLUGIN, [PLUGIN], {"EXTRUN_PROTOCOL_FDS": "3,4", "PATH": os.environ["PATH"]}, file_actions=[
            (os.POSIX_SPAWN_DUP2, devnull, 0), (os.POSIX_SPAWN_DUP2, devnull, 1),
            (os.POSIX_SPAWN_DUP2, self.stderr.fileno(), 2),
            (os.POSIX_SPAWN_DUP2, to_read, 3), (os.POSIX_SPAWN_DUP2, from_write, 4)])
        for fd in (to_read, from_write, devnull):
            os.close(fd)
        self.buffer = bytearray()
        self.status = None

    def write(self, data, piece=None):
        """Writes data, in pieces of `piece` bytes with pauses when asked to."""
        for start in range(0, len(data), piece or len(data)):
            os.write(self.to_plugin, data[start:start + (piece or len(data))])
            if piece:
                time.sleep(0.001)

    def read(self):
        """The next message from the plugin."""
        while b"\r\n\r\n" not in self.buffer:
            self.buffer += os.read(self.from_plugin, 1 << 16)
        header, _, rest = self.buffer.partition(b"\r\n\r\n")
        length = int(header.split(b":")[1])
        while len(rest) < length:
            rest += os.read(self.from_plugin, 1 << 16)
        self.buffer = rest[length:]
        return json.loads(bytes(rest[:length]))

    def close(self):
        """Closes fd 3 (once) and returns the exit status."""
        if self.status is None:
            os.close(self.to_plugin)
            self.status = os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])
            os.close(self.from_plugin)
        return self.status


class PluginTests(unittest.TestCase):
    def setUp(self):
        self.plugin = Plugin()

    def tearDown(self):
        self.plugin.close()
        self.plugin.stderr.close()

    def finish(self):
        return self.plugin.close()

    def test_whole_session_in_byte_sized_pieces(self):
        p = self.plugin
        p.write(INITIALIZE, piece=1)
        self.assertEqual(p.read()["result"], {"protocolVersion": 1, "plugin": {"id": "com.example.python-uppercase", "version": "1.0.0"},
                                              "intents": ["ShoutText"]})
        p.write(request(2, "resolve", {"intent": "ShoutText", "parameter": "text", "parameters": {"text": "hi"}}), piece=7)
        self.assertEqual(p.read(), {"jsonrpc": "2.0", "id": 2, "result": {"result": "success", "value": "hi"}})
        p.write(request(3, "confirm", {"intent": "ShoutText", "parameters": {"text": "hi"}}), piece=3)
        self.assertEqual(p.read()["result"], {"code": "ready"})
        p.write(request(4, "handle", {"intent": "ShoutText", "parameters": {"text": "hi"}}))
        self.assertEqual(p.read(), {"jsonrpc": "2.0", "method": "log", "params": {"level": "info", "message": "shouting 3 characters"}})
        self.assertEqual(p.read()["result"], {"code": "success", "properties": {"result": "HI!"}, "dialog": {"full": "HI!"}})
        self.assertEqual(self.finish(), 0)

    def test_several_frames_in_one_write_and_string_ids(self):
        p = self.plugin
        p.write(INITIALIZE
                + request("a", "resolve", {"intent": "ShoutText", "parameter": "text", "parameters": {}})
                + request("b", "resolve", {"intent": "ShoutText", "parameter": "text", "parameters": {"text": " \t"}})
                + request("c", "resolve", {"intent": "ShoutText", "parameter": "other", "parameters": {}}))
        self.assertEqual(p.read()["id"], 1)
        self.assertEqual(p.read(), {"jsonrpc": "2.0", "id": "a", "result": {"result": "needsValue", "prompt": "Which text should I shout?"}})
        self.assertEqual(p.read()["result"], {"result": "unsupported", "reason": "empty", "message": "Please enter some text to shout"})
        self.assertEqual(p.read()["result"], {"result": "notRequired"})
        self.assertEqual(self.finish(), 0)

    def test_large_message(self):
        p = self.plugin
        text = "é" * (3 << 20)  # 6 MiB of UTF-8: more than a pipe holds, both ways
        p.write(INITIALIZE + request(2, "handle", {"intent": "ShoutText", "parameters": {"text": text}}))
        p.read(), p.read()  # the initialize result, the log notification
        self.assertEqual(p.read()["result"]["properties"]["result"], "É" * (3 << 20) + "!")
        self.assertEqual(self.finish(), 0)

    def test_errors(self):
        p = self.plugin
        p.write(INITIALIZE + request(2, "frobnicate", {}) + request(3, "handle", {"intent": "Other", "parameters": {}})
                + frame(b"{not json") + request(4, "resolve", []))
        p.read()
        self.assertEqual(p.read()["error"]["code"], -32601)
        self.assertEqual(p.read()["error"]["code"], -32001)
        reply = p.read()
        self.assertEqual((reply["id"], reply["error"]["code"]), (None, -32700))
        self.assertEqual(p.read()["error"]["code"], -32602)
        self.assertEqual(self.finish(), 0)

    def test_cancel(self):
        p = self.plugin
        p.write(INITIALIZE + frame({"jsonrpc": "2.0", "method": "cancel", "params": {"reason": "timeout"}})
                + request(2, "handle", {"intent": "ShoutText", "parameters": {"text": "hi"}}))
        p.read()
        self.assertEqual(p.read()["error"]["code"], -32002)
        self.assertEqual(self.finish(), 0)

    def test_malformed_header_ends_the_plugin(self):
        p = self.plugin
        p.write(b"Content-Length: many\r\n\r\n{}")
        self.assertEqual(self.finish(), 70)
        p.stderr.seek(0)
        self.assertIn(b"invalid Content-Length", p.stderr.read())


if __name__ == "__main__":
    unittest.main()
