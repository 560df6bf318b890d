#!/usr/bin/env python3
"""Tests of extrun_plugin.py without the host: python3 -m unittest discover -s SDKs/python

The test plays the host: it runs a Plugin on two pipes (in a thread) and
writes and reads frames byte for byte as docs/protocol.md says the host does."""

import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import threading
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import extrun_plugin as extrun  # noqa: E402

MODULE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "extrun_plugin.py")


def request(request_id, method, params):
    return extrun.frame({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})


def initialize(intent="Order"):
    return request(1, "initialize", {"protocolVersion": 1, "hostVersion": "test", "mode": "extension", "intent": intent})


class FramingTests(unittest.TestCase):
    def frames(self, *pieces):
        reader = extrun.FrameReader()
        bodies = []
        for piece in pieces:
            reader.feed(piece)
            bodies += list(reader.frames())
        return bodies, reader

    def test_byte_by_byte_and_several_in_one(self):
        data = extrun.frame(b'{"a":1}') + extrun.frame({"b": "é"}) + extrun.frame(b"")
        bodies, reader = self.frames(*[data[i:i + 1] for i in range(len(data))])
        self.assertEqual(bodies, [b'{"a":1}', '{"b":"é"}'.encode(), b""])
        self.assertFalse(reader.in_frame)
        self.assertEqual(self.frames(data)[0], bodies)

    def test_header_rules(self):
        # Case-insensitive name, spaces and tabs, other fields ignored, the last Content-Length counts.
        bodies, _ = self.frames(b"Content-Type: x\r\ncontent-LENGTH :\t1 \r\nContent-Length: 2\r\n\r\n{}")
        self.assertEqual(bodies, [b"{}"])
        length = len("é".encode())
        self.assertEqual(extrun.frame("é".encode()), b"Content-Length: %d\r\n\r\n" % length + "é".encode())

    def test_malformed_headers(self):
        for data, message in [(b"Content-Length: abc\r\n\r\n", "invalid Content-Length"),
                              (b"Content-Length: -1\r\n\r\n", "invalid Content-Length"),
                              (b"Content-Length: 1234567890123456789\r\n\r\n", "invalid Content-Length"),
                              (b"Content-Type: x\r\n\r\n", "no Content-Length"),
                              (b"Content-Length 2\r\n\r\n{}", "malformed header line"),
                              (b"Content-L\xc3\xa9ngth: 2\r\n", "not ASCII"),
                              (b"X" * 1030, "longer than 1024"),
                              (b"Content-Length: %d\r\n\r\n" % ((64 << 20) + 1), "too large")]:
            with self.assertRaises(extrun.FramingError, msg=data[:40]) as caught:
                self.frames(data)
            self.assertIn(message, str(caught.exception))


class Soup(extrun.Intent):
    name = "Order"
    MENU = [("clam", "Clam Chowder"), ("tomato", "Tomato Soup")]

    def resolve(self, parameter, values, context):
        if parameter == "soup" and "soup" not in values:
            return extrun.Resolution.needs_value("Which soup?")
        if parameter == "note" and values.get("note") == "":
            return extrun.Resolution.unsupported("empty")
        return super().resolve(parameter, values, context)

    def options(self, parameter, values, search, context):
        items = [extrun.option(i, t, {"identifier": i, "title": t}) for i, t in self.MENU]
        return [extrun.section(items, title="Menu")]

    def handle(self, values, context):
        if values.get("soup") == "boom":
            raise ValueError("the pot fell over")
        if values.get("soup") == "count":
            value, version = context.globals.update("orders", lambda n: (n or 0) + 1)
            return extrun.Response.success({"orders": value, "version": version})
        if values.get("soup") == "missing":
            try:
                context.bookmarks.read("recipes", "x.txt")
            except extrun.ServiceError as error:
                return extrun.Response.failure("no recipe: %s" % error.kind)
        if values.get("soup") == "wait":
            context.progress(0.5, "simmering")
            while not context.cancelled:
                pass
            raise extrun.RPCError(extrun.CANCELLED, "stopped")
        if context.mode == "extension" and values.get("soup") == "app":
            return extrun.Response.continue_in_app("Order")
        return extrun.Response.success({"soup": values.get("soup"), "mode": context.mode}, dialog="Coming up.")


class Reader(extrun.Activity):
    activity_type = "com.example.read"

    def continue_activity(self, activity, interaction, context):
        return extrun.Response.success({"read": activity.get("userInfo")})


class Host:
    """A Plugin served in a thread on two pipes; this side plays the host."""

    def __init__(self, **options):
        to_plugin_read, self.to_plugin = os.pipe()
        self.from_plugin, from_plugin_write = os.pipe()
        self.plugin = extrun.Plugin("test.soup", "2.0", [Soup()], activities=[Reader()],
                                    channel=extrun.Channel(to_plugin_read, from_plugin_write), **options)
        self.reader = extrun.FrameReader()
        self.queue = []
        self.failure = None
        self.thread = threading.Thread(target=self.serve, args=(to_plugin_read, from_plugin_write), daemon=True)
        self.thread.start()

    def serve(self, read_fd, write_fd):
        try:
            self.plugin.serve()
        except BaseException as error:  # noqa: B036 (reported by close)
            self.failure = error
        os.close(read_fd)
        os.close(write_fd)

    def write(self, data):
        os.write(self.to_plugin, data)

    def read(self):
        while not self.queue:
            chunk = os.read(self.from_plugin, 1 << 16)
            if not chunk:
                raise EOFError("the plugin closed fd 4")
            self.reader.feed(chunk)
            self.queue += [json.loads(body) for body in self.reader.frames()]
        return self.queue.pop(0)

    def call(self, request_id, method, params):
        self.write(request(request_id, method, params))
        return self.read()

    def close(self):
        if self.to_plugin is not None:
            os.close(self.to_plugin)
            self.thread.join(5)
            os.close(self.from_plugin)
            self.to_plugin = None
        return self.failure


class LifecycleTests(unittest.TestCase):
    def setUp(self):
        self.host = Host()
        self.addCleanup(self.host.close)

    def test_a_session_step_by_step(self):
        h = self.host
        h.write(initialize())
        self.assertEqual(h.read()["result"], {"protocolVersion": 1, "plugin": {"id": "test.soup", "version": "2.0"},
                                              "intents": ["Order"], "reusable": True, "session": True})
        self.assertEqual(h.call(2, "resolve", {"intent": "Order", "parameter": "soup", "parameters": {}})["result"],
                         {"result": "needsValue", "prompt": "Which soup?"})
        self.assertEqual(h.call("s", "resolve", {"intent": "Order", "parameter": "soup", "parameters": {"soup": "clam"}}),
                         {"jsonrpc": "2.0", "id": "s", "result": {"result": "success", "value": "clam"}})
        self.assertEqual(h.call(4, "resolve", {"intent": "Order", "parameter": "size", "parameters": {}})["result"],
                         {"result": "notRequired"})
        self.assertEqual(h.call(5, "confirm", {"intent": "Order", "parameters": {"soup": "clam"}})["result"], {"code": "ready"})
        self.assertEqual(h.call(6, "handle", {"intent": "Order", "parameters": {"soup": "clam"}})["result"],
                         {"code": "success", "properties": {"soup": "clam", "mode": "extension"}, "dialog": {"full": "Coming up."}})
        self.assertIsNone(h.close())

    def test_options(self):
        h = self.host
        h.write(initialize())
        h.read()
        answer = h.call(2, "options", {"intent": "Order", "parameter": "soup", "parameters": {}, "search": "chow"})
        self.assertEqual(answer["result"]["sections"][0]["title"], "Menu")
        self.assertEqual(answer["result"]["sections"][0]["items"][0],
                         {"identifier": "clam", "title": "Clam Chowder", "value": {"identifier": "clam", "title": "Clam Chowder"}})

    def test_errors(self):
        h = self.host
        h.write(initialize())
        h.read()
        self.assertEqual(h.call(2, "frobnicate", {})["error"]["code"], extrun.METHOD_NOT_FOUND)
        self.assertEqual(h.call(3, "handle", {"intent": "Other", "parameters": {}})["error"]["code"], extrun.UNKNOWN_INTENT)
        self.assertEqual(h.call(4, "resolve", [])["error"]["code"], extrun.INVALID_PARAMS)
        with contextlib.redirect_stderr(io.StringIO()) as stderr:  # the traceback goes to stderr, for the host's log
            error = h.call(5, "handle", {"intent": "Order", "parameters": {"soup": "boom"}})["error"]
        self.assertIn("ValueError: the pot fell over", stderr.getvalue())
        self.assertEqual(error, {"code": extrun.INTERNAL_ERROR, "message": "ValueError: the pot fell over"})
        h.write(extrun.frame(b"{not json"))
        self.assertEqual(h.read()["error"]["code"], extrun.PARSE_ERROR)
        self.assertEqual(h.call(6, "initialize", {"protocolVersion": 2})["error"]["code"], extrun.INVALID_PARAMS)
        self.assertEqual(h.call(7, "shutdown", None), {"jsonrpc": "2.0", "id": 7, "result": None})

    def test_host_services_with_a_version_conflict(self):
        h = self.host
        h.write(initialize())
        h.read()
        h.write(request(2, "handle", {"intent": "Order", "parameters": {"soup": "count"}}))
        get = h.read()
        self.assertEqual((get["method"], get["params"]), ("globals.get", {"name": "orders"}))
        h.write(extrun.frame({"jsonrpc": "2.0", "id": get["id"], "result": {"value": 4, "version": 9}}))
        first = h.read()
        self.assertEqual((first["method"], first["params"]), ("globals.set", {"name": "orders", "value": 5, "ifVersion": 9}))
        h.write(extrun.frame({"jsonrpc": "2.0", "id": first["id"], "error": {
            "code": -32003, "message": "at version 10, not 9", "data": {"kind": "versionConflict"}}}))
        again = h.read()  # after a short random wait, it reads again
        self.assertEqual(again["method"], "globals.get")
        h.write(extrun.frame({"jsonrpc": "2.0", "id": again["id"], "result": {"value": 7, "version": 10}}))
        second = h.read()
        self.assertEqual(second["params"], {"name": "orders", "value": 8, "ifVersion": 10})
        self.assertNotEqual(second["id"], first["id"])
        h.write(extrun.frame({"jsonrpc": "2.0", "id": second["id"], "result": {"version": 11}}))
        self.assertEqual(h.read(), {"jsonrpc": "2.0", "id": 2, "result": {"code": "success", "properties": {"orders": 8, "version": 11}}})

    def test_a_refused_service_request_is_the_handlers_to_answer(self):
        h = self.host
        h.write(initialize())
        h.read()
        h.write(request(2, "handle", {"intent": "Order", "parameters": {"soup": "missing"}}))
        read = h.read()
        self.assertEqual((read["method"], read["params"]), ("bookmarks.read", {"bookmark": "recipes", "path": "x.txt"}))
        h.write(extrun.frame({"jsonrpc": "2.0", "id": read["id"], "error": {
            "code": -32003, "message": "no", "data": {"kind": "unsignedPlugin"}}}))
        self.assertEqual(h.read()["result"], {"code": "failure", "properties": {}, "dialog": {"full": "no recipe: unsignedPlugin"}})

    def test_cancel_reaches_a_busy_handler(self):
        h = self.host
        h.write(initialize())
        h.read()
        h.write(request(2, "handle", {"intent": "Order", "parameters": {"soup": "wait"}}))
        self.assertEqual(h.read(), {"jsonrpc": "2.0", "method": "progress", "params": {"fraction": 0.5, "message": "simmering"}})
        h.write(extrun.frame({"jsonrpc": "2.0", "method": "cancel", "params": {"reason": "timeout"}}))
        self.assertEqual(h.read()["error"]["code"], extrun.CANCELLED)
        # What comes after a cancel is refused too.
        self.assertEqual(h.call(3, "confirm", {"intent": "Order", "parameters": {}})["error"]["code"], extrun.CANCELLED)

    def test_continue_in_the_app(self):
        h = self.host
        h.write(request(1, "initialize", {"protocolVersion": 1, "hostVersion": "t", "mode": "in-app", "intent": "Order"}))
        h.read()
        interaction = {"intent": "Order", "parameters": {"soup": "app"}, "response": {"code": "continueInApp"}}
        self.assertEqual(h.call(2, "continue", {"activity": {"activityType": "Order"}, "interaction": interaction})["result"],
                         {"code": "success", "properties": {"soup": "app", "mode": "in-app"}, "dialog": {"full": "Coming up."}})
        self.assertEqual(h.call(3, "continue", {"activity": {"activityType": "com.example.read", "userInfo": {"p": 3}}})["result"],
                         {"code": "success", "properties": {"read": {"p": 3}}})


class SessionTests(unittest.TestCase):
    """The `session` request follows docs/protocol.md §15.1's rule."""

    def session(self, parameters, resolve, handle=True):
        host = Host()
        self.addCleanup(host.close)
        host.write(initialize())
        host.read()
        return host.call(2, "session", {"intent": "Order", "parameters": parameters, "resolve": resolve, "handle": handle})["result"]

    def test_the_whole_session(self):
        self.assertEqual(self.session({"soup": "tomato"}, [{"parameter": "soup", "required": True}, {"parameter": "note"}]), {
            "resolutions": [{"parameter": "soup", "result": {"result": "success", "value": "tomato"}},
                            {"parameter": "note", "result": {"result": "notRequired"}}],
            "confirm": {"code": "ready"},
            "handle": {"code": "success", "properties": {"soup": "tomato", "mode": "extension"}, "dialog": {"full": "Coming up."}}})

    def test_polls_after_a_session_answer_as_the_host_says_and_stops_when_nothing_comes(self):
        host = Host()
        self.addCleanup(host.close)
        host.write(initialize())
        host.read()
        params = {"intent": "Order", "parameters": {"soup": "clam"}, "resolve": [{"parameter": "soup"}], "handle": True}
        # A request that comes at once is found by the poll; the answers are those of any session.
        for i in range(3):
            answer = host.call(10 + i, "session", dict(params, pollAfterUs=200))["result"]
            self.assertEqual(answer["handle"]["properties"]["soup"], "clam")
        self.assertEqual(host.plugin._fruitless_polls, 0)
        # No hint, 0, or a wrong type: no poll at all.
        for i, hint in enumerate([None, 0, "soon", True]):
            call = dict(params) if hint is None else dict(params, pollAfterUs=hint)
            self.assertIn("handle", host.call(20 + i, "session", call)["result"])
        self.assertEqual(host.plugin._waits, 3)
        # Requests that come later than the poll lasts: after MAX_FRUITLESS_POLLS of them in a
        # row, only every PROBE_EVERY-th wait polls.
        for i in range(extrun.Plugin.MAX_FRUITLESS_POLLS + 8):
            host.call(30 + i, "session", dict(params, pollAfterUs=1))
            time.sleep(0.005)
        self.assertGreaterEqual(host.plugin._fruitless_polls, extrun.Plugin.MAX_FRUITLESS_POLLS)
        self.assertLess(host.plugin._fruitless_polls, extrun.Plugin.MAX_FRUITLESS_POLLS + 8)

    def test_stops_where_the_host_must_act(self):
        self.assertEqual(self.session({}, [{"parameter": "soup", "required": True}, {"parameter": "note"}]),
                         {"resolutions": [{"parameter": "soup", "result": {"result": "needsValue", "prompt": "Which soup?"}}]})
        answer = self.session({"soup": "clam", "note": ""}, [{"parameter": "soup"}, {"parameter": "note"}])
        self.assertEqual(answer["resolutions"][-1]["result"], {"result": "unsupported", "reason": "empty"})
        self.assertNotIn("confirm", answer)

    def test_a_parameter_whose_parent_does_not_match_is_removed_unresolved(self):
        answer = self.session({"soup": "clam", "note": "hot"},
                              [{"parameter": "soup"}, {"parameter": "note", "parent": {"parameter": "soup", "value": "tomato"}}],
                              handle=False)
        self.assertEqual([r["parameter"] for r in answer["resolutions"]], ["soup"])
        self.assertEqual(answer["confirm"], {"code": "ready"})
        self.assertNotIn("handle", answer)

    def test_one_shot_declares_nothing(self):
        host = Host(reusable=False)
        self.addCleanup(host.close)
        host.write(initialize())
        self.assertNotIn("reusable", host.read()["result"])


class ProcessTests(unittest.TestCase):
    def test_started_by_hand_it_says_so(self):
        with tempfile.TemporaryDirectory() as folder:
            script = os.path.join(folder, "plugin.py")
            with open(script, "w") as f:
                f.write("import extrun_plugin as e\ne.run('test.x', '1', [])\n")
            done = subprocess.run([sys.executable, "-B", script], env={"PYTHONPATH": os.path.dirname(MODULE)},
                                  stdin=subprocess.DEVNULL, capture_output=True, close_fds=True)
            self.assertEqual(done.returncode, 64)
            self.assertIn(b"test.x is an extrun plugin", done.stderr)

    def test_garbage_from_the_host_exits_70_and_end_of_file_exits_0(self):
        with tempfile.TemporaryDirectory() as folder:
            script = os.path.join(folder, "plugin.py")
            with open(script, "w") as f:
                f.write("import extrun_plugin as e\ne.run('test.x', '1', [])\n")
            for data, status in [(b"Content-Length: x\r\n\r\n", 70), (initialize(), 0)]:
                to_read, to_write = os.pipe()
                from_read, from_write = os.pipe()
                env = {"PYTHONPATH": os.path.dirname(MODULE), "EXTRUN_PROTOCOL_FDS": "%d,%d" % (to_read, from_write)}
                child = subprocess.Popen([sys.executable, "-B", script], env=env, stdin=subprocess.DEVNULL,
                                         stderr=subprocess.PIPE, pass_fds=(to_read, from_write))
                os.close(to_read)
                os.close(from_write)
                os.write(to_write, data)
                os.close(to_write)
                self.assertEqual(child.wait(10), status)
                if status == 70:
                    self.assertIn(b"invalid Content-Length", child.stderr.read())
                child.stderr.close()
                os.close(from_read)


if __name__ == "__main__":
    unittest.main()
