"""extrun_plugin: write an extrun plugin in Python (3.8+, standard library only).

One file: copy it beside your plugin's script (the plugin folder is what the
host signs and what the sandbox starts; Python finds a module beside the
script). It speaks docs/protocol.md for you: the framing on fds 3 and 4, the
lifecycle (initialize, resolve, confirm, handle, options, continue, session,
cancel), and the host's services (globals, bookmarks, donations).

    #!/usr/bin/env python3
    import sys
    sys.dont_write_bytecode = True      # no __pycache__ in the signed plugin folder
    import extrun_plugin as extrun

    class ShoutText(extrun.Intent):
        name = "ShoutText"

        def resolve(self, parameter, values, context):
            if parameter == "text" and not (values.get("text") or "").strip():
                return extrun.Resolution.needs_value()
            return super().resolve(parameter, values, context)

        def handle(self, values, context):
            return extrun.Response.success({"result": values["text"].upper()})

    extrun.run("com.example.shout", "1.0.0", [ShoutText()])

Every protocol method is a method of `Intent` with a default; `handle` is the
only one you must write. docs/plugin-guide.md, "Plugins in Python", has more.
"""

import json
import os
import select
import sys
import time

# base64, random, time and traceback are imported where they are used: every
# module loaded at start counts against the extension's 30 MiB.

__all__ = [
    "run", "Plugin", "Intent", "Activity", "Context", "Resolution", "Response", "option", "section",
    "RPCError", "ServiceError", "FramingError", "FrameReader", "frame", "encode",
    "PROTOCOL_VERSION", "PARSE_ERROR", "INVALID_REQUEST", "METHOD_NOT_FOUND", "INVALID_PARAMS",
    "INTERNAL_ERROR", "UNKNOWN_INTENT", "CANCELLED", "SERVICE_ERROR",
]

PROTOCOL_VERSION = 1

# JSON-RPC 2.0's error codes, then extrun's (docs/protocol.md §10).
PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR = -32700, -32600, -32601, -32602, -32603
UNKNOWN_INTENT, CANCELLED, SERVICE_ERROR = -32001, -32002, -32003

MAX_HEADER_BYTES = 1024        # the header block, without the blank line that ends it (§2)
MAX_BODY_BYTES = 64 << 20      # what a plugin should accept at least (§2)
STANDARD_CODES = ("success", "failure", "continueInApp", "failureRequiringAppLaunch", "inProgress", "ready", "unspecified")


# ---- Errors -------------------------------------------------------------------

class FramingError(Exception):
    """The byte stream is not a sequence of frames: it cannot be trusted any more."""


class RPCError(Exception):
    """Raise it from a handler to answer with this error (docs/protocol.md §10).

    -32001, -32601 and -32602 are reported by the host as protocolError, any
    other code as pluginError with your message."""

    def __init__(self, code, message, data=None):
        super().__init__(message)
        self.code, self.message, self.data = code, message, data

    def to_json(self):
        error = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error


class ServiceError(RPCError):
    """The host refused a request to one of its services (§5.6): `kind` says why
    (notFound, versionConflict, readOnly, pathEscape, unsignedPlugin...).
    It does not end the run: catch it and decide what to answer."""

    @property
    def kind(self):
        return (self.data or {}).get("kind") if isinstance(self.data, dict) else None


# ---- Framing (§2) ---------------------------------------------------------------

def encode(message):
    """The compact UTF-8 JSON body of a message."""
    return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def frame(body):
    """One frame: `Content-Length: N\\r\\n\\r\\n` then the body (bytes, or a message to encode)."""
    if not isinstance(body, (bytes, bytearray)):
        body = encode(body)
    return b"Content-Length: %d\r\n\r\n" % len(body) + bytes(body)


def content_length(header):
    """The body length named by a header block (ASCII `Name: value` lines; the last Content-Length counts)."""
    if not header.isascii():
        raise FramingError("frame header is not ASCII")
    length = None
    for line in header.decode("ascii").split("\r\n"):
        name, colon, value = line.partition(":")
        if not colon:
            raise FramingError("malformed header line %r" % line)
        if name.strip(" \t").lower() == "content-length":
            value = value.strip(" \t")
            if not value.isdigit() or len(value) > 18:
                raise FramingError("invalid Content-Length %r" % value)
            length = int(value)
    if length is None:
        raise FramingError("frame header has no Content-Length")
    if length > MAX_BODY_BYTES:
        raise FramingError("frame of %d bytes is too large (at most %d)" % (length, MAX_BODY_BYTES))
    return length


class FrameReader:
    """Takes whole frames out of bytes that arrive in arbitrary pieces.

    A pipe has no message boundaries: one read may hold part of a frame or
    several frames. `feed` the bytes of each read, then take `frames()`."""

    def __init__(self):
        self.buffer = bytearray()

    def feed(self, data):
        self.buffer += data

    def frames(self):
        """Yields the body (bytes) of every whole frame in the buffer; keeps the rest."""
        while True:
            end = self.buffer.find(b"\r\n\r\n", 0, MAX_HEADER_BYTES + 4)
            if end < 0:
                if len(self.buffer) >= MAX_HEADER_BYTES + 4:
                    raise FramingError("frame header longer than %d bytes" % MAX_HEADER_BYTES)
                if not self.buffer[:MAX_HEADER_BYTES].isascii():
                    raise FramingError("frame header is not ASCII")
                return
            length = content_length(bytes(self.buffer[:end]))
            start = end + 4
            if len(self.buffer) < start + length:
                return
            body = bytes(self.buffer[start:start + length])
            del self.buffer[:start + length]
            yield body

    @property
    def in_frame(self):
        """Whether part of a frame is buffered (end of file now is an error)."""
        return bool(self.buffer)


class Channel:
    """The protocol's two descriptors: messages in on `read_fd`, out on `write_fd`."""

    def __init__(self, read_fd, write_fd):
        self.read_fd, self.write_fd = read_fd, write_fd
        self.reader = FrameReader()
        self.pending = []          # messages read but not handled yet
        self.closed = False        # end of file on read_fd

    def write(self, data):
        """Writes every byte (a write to a pipe may take only part of them)."""
        view = memoryview(data)
        while view:
            view = view[os.write(self.write_fd, view):]

    def send(self, message):
        self.write(frame(message))

    def _fill(self, timeout):
        """Reads once (waiting at most `timeout` seconds; None: until data comes) and
        queues the whole messages. False when nothing came."""
        if self.closed:
            return False
        if timeout is not None and not select.select([self.read_fd], [], [], timeout)[0]:
            return False
        chunk = os.read(self.read_fd, 1 << 16)
        if not chunk:
            self.closed = True
            if self.reader.in_frame:
                raise FramingError("end of file in the middle of a frame")
            return True
        self.reader.feed(chunk)
        for body in self.reader.frames():
            self.pending.append(decode(body))
        return True

    def arrives_within(self, seconds):
        """Whether input arrives within `seconds`, read for without sleeping (yielding the
        CPU between tries): the wait after an answer the host gave `pollAfterUs` (§15.1)."""
        deadline = time.monotonic() + seconds
        while not self.closed:
            if select.select([self.read_fd], [], [], 0)[0]:
                return True
            if time.monotonic() >= deadline:
                return False
            os.sched_yield()
        return True

    def receive(self):
        """The next message, or None at end of file."""
        while not self.pending:
            if self.closed:
                return None
            self._fill(None)
        return self.pending.pop(0)

    def poll(self):
        """Reads what has already arrived, without waiting."""
        while self._fill(0):
            if self.closed:
                break


def decode(body):
    """A message as a dict, or a marker the loop answers with an error (§3)."""
    try:
        message = json.loads(body)
    except ValueError as error:  # not UTF-8 or not JSON
        return _Invalid(PARSE_ERROR, "not JSON: %s" % error)
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        return _Invalid(INVALID_REQUEST, "not a JSON-RPC 2.0 message")
    return message


class _Invalid:
    def __init__(self, code, message):
        self.code, self.message = code, message


# ---- What handlers answer (§6, §7, §5.4a) ----------------------------------------

class Resolution:
    """Resolution results, the answers of `resolve` (docs/protocol.md §6)."""

    @staticmethod
    def success(value):
        """Use this value (`None` removes the parameter's value)."""
        return {"result": "success", "value": value}

    @staticmethod
    def needs_value(prompt=None):
        return _without_none({"result": "needsValue", "prompt": prompt})

    @staticmethod
    def disambiguation(options, prompt=None):
        return _without_none({"result": "disambiguation", "options": list(options), "prompt": prompt})

    @staticmethod
    def confirmation_required(value, prompt=None):
        return _without_none({"result": "confirmationRequired", "value": value, "prompt": prompt})

    @staticmethod
    def unsupported(reason=None, message=None):
        """`reason`: a short code; the manifest's `unsupportedReasons` may give its message."""
        return _without_none({"result": "unsupported", "reason": reason, "message": message})

    @staticmethod
    def not_required():
        return {"result": "notRequired"}


class Response:
    """Intent responses, the answers of `confirm`, `handle` and `continue` (§7)."""

    @staticmethod
    def make(code, properties=None, dialog=None, supporting=None, user_activity=None, progress=None):
        """Any code: a standard one or one the manifest declares for the intent."""
        response = {"code": code, "properties": dict(properties or {})}
        if dialog is not None or supporting is not None:
            response["dialog"] = _without_none({"full": dialog, "supporting": supporting})
        if user_activity is not None:
            response["userActivity"] = user_activity
        if progress is not None:
            response["progress"] = progress
        return response

    @staticmethod
    def success(properties=None, dialog=None, **more):
        return Response.make("success", properties, dialog, **more)

    @staticmethod
    def failure(dialog=None, properties=None, **more):
        return Response.make("failure", properties, dialog, **more)

    @staticmethod
    def ready():
        return {"code": "ready"}

    @staticmethod
    def continue_in_app(activity_type, title=None, user_info=None, properties=None, dialog=None):
        """Hands over to the app (§5.4b): the host starts the plugin again in in-app mode."""
        activity = _without_none({"activityType": activity_type, "title": title, "userInfo": user_info})
        return Response.make("continueInApp", properties, dialog, user_activity=activity)


def option(identifier, title, value, subtitle=None, image=None):
    """One item of an `options` answer: `value` is the parameter value it stands for."""
    return _without_none({"identifier": identifier, "title": title, "subtitle": subtitle, "image": image, "value": value})


def section(items, title=None):
    """A section of `options` items."""
    return _without_none({"title": title, "items": list(items)})


def _without_none(d):
    return {k: v for k, v in d.items() if v is not None}


# ---- Handlers -------------------------------------------------------------------

class Intent:
    """The handler of one intent: subclass it, set `name`, write `handle`.

    `values` is the dict of the parameters' current values (absent: no value),
    exactly as on the wire (docs/protocol.md §8: a file is a dict with
    `filename`, `typeIdentifier` and base64 `data`; `extrun_plugin.file_bytes`
    decodes it)."""

    name = None

    def resolve(self, parameter, values, context):
        """Called once per manifest parameter, in order. Default: keep the value as given."""
        if parameter in values:
            return Resolution.success(values[parameter])
        return Resolution.not_required()

    def confirm(self, values, context):
        """Called after every parameter is resolved. Default: ready. Anything else ends the session."""
        return Response.ready()

    def handle(self, values, context):
        raise NotImplementedError("%s.handle is not written" % type(self).__name__)

    def options(self, parameter, values, search, context):
        """The values a person may pick for `parameter`: a list of `section`s.

        `search` is what the person typed, or None. `extrun phrase` asks
        with the phrase's words in `search` too: match them loosely (accents,
        case) or ignore them, since the host matches the titles itself."""
        return []

    def continue_in_app(self, activity, interaction, context):
        """In-app mode, after this intent's continueInApp (§5.4b). Default: `handle`
        with the parameters the extension resolved."""
        return self.handle((interaction or {}).get("parameters") or {}, context)


class Activity:
    """Continues a user activity type in in-app mode (`extrun continue`, §5.4b)."""

    activity_type = None

    def continue_activity(self, activity, interaction, context):
        raise NotImplementedError("%s.continue_activity is not written" % type(self).__name__)


# ---- The context: mode, log, progress, cancel, host services ----------------------

class Context:
    """What a handler gets besides the values: the mode, logging, progress,
    cancellation, and the host's services for the plugin's owner."""

    def __init__(self, plugin):
        self._plugin = plugin
        self.globals = Globals(self)
        self.bookmarks = Bookmarks(self)
        self.donations = Donations(self)

    @property
    def mode(self):
        """"extension" or "in-app"."""
        return self._plugin.mode

    def log(self, message, level="info"):
        """Shown by `extrun handle --verbose` as `[<plugin id> log <level>] <message>`."""
        self._plugin.notify("log", {"level": level, "message": message})

    def progress(self, fraction=None, message=None):
        """In extension mode, gives the plugin a full deadline again from now (up to the mode's maximum)."""
        self._plugin.notify("progress", _without_none({"fraction": fraction, "message": message}))

    @property
    def cancelled(self):
        """True once the host sent `cancel` (its deadline passed): stop and answer
        soon. Reading it looks at what has arrived on fd 3, without waiting."""
        self._plugin.channel.poll()
        self._plugin.take_notifications()
        return self._plugin.cancelled

    def check_cancelled(self):
        """Raises RPCError(-32002) when the host cancelled."""
        if self.cancelled:
            raise RPCError(CANCELLED, "cancelled by the host")

    def request(self, method, params=None):
        """Sends a request to the host and returns its result (raises ServiceError or RPCError)."""
        return self._plugin.request(method, params or {})


class Globals:
    """The owner's global variables (named JSON values, versioned): docs/protocol.md §5.6."""

    def __init__(self, context):
        self._context = context

    def entry(self, name):
        """{"value": ..., "version": N}, or None when there is none."""
        return self._context.request("globals.get", {"name": name})

    def get(self, name, default=None):
        entry = self.entry(name)
        return default if entry is None else entry.get("value")

    def set(self, name, value, if_version=None):
        """Returns the new version. With if_version, only if the current version is exactly
        that (0: only if it does not exist); else ServiceError with kind versionConflict."""
        params = {"name": name, "value": value}
        if if_version is not None:
            params["ifVersion"] = if_version
        return self._context.request("globals.set", params)["version"]

    def delete(self, name, if_version=None):
        params = {"name": name}
        if if_version is not None:
            params["ifVersion"] = if_version
        return self._context.request("globals.delete", params)["deleted"]

    def list(self, after=None, limit=None):
        """[{"name", "version", "byteCount"}] in name order; page with after = the last name seen."""
        return self._context.request("globals.list", _without_none({"after": after, "limit": limit}))["globals"]

    def update(self, name, change, attempts=8, first_delay=0.005):
        """Compare-and-set: sets `name` to change(current value or None), retrying when another
        run changed it meanwhile. Waits a random 0..first_delay*2^n seconds before retry n
        (exponential backoff with jitter), so racing runs spread out. Returns (value, version);
        raises the last versionConflict after `attempts` tries."""
        for attempt in range(attempts):
            entry = self.entry(name)
            value = change(None if entry is None else entry.get("value"))
            try:
                return value, self.set(name, value, if_version=0 if entry is None else entry["version"])
            except ServiceError as error:
                if error.kind != "versionConflict" or attempt == attempts - 1:
                    raise
            import random
            import time
            time.sleep(random.uniform(0, first_delay * (2 ** attempt)))


class Bookmarks:
    """Files and folders the person bookmarked for the owner: paths are relative to a bookmark."""

    def __init__(self, context):
        self._context = context

    def list(self):
        return self._context.request("bookmarks.list")["bookmarks"]

    def stat(self, bookmark, path=""):
        return self._context.request("bookmarks.stat", {"bookmark": bookmark, "path": path})

    def list_folder(self, bookmark, path="", glob=None, recursive=None):
        params = _without_none({"bookmark": bookmark, "path": path, "glob": glob, "recursive": recursive})
        return self._context.request("bookmarks.listFolder", params)["entries"]

    def read(self, bookmark, path=""):
        """The file's bytes."""
        import base64
        return base64.b64decode(self._context.request("bookmarks.read", {"bookmark": bookmark, "path": path})["data"])

    def write(self, bookmark, path, data, overwrite=None):
        """Writes bytes (or str, as UTF-8) atomically; returns the file entry."""
        import base64
        if isinstance(data, str):
            data = data.encode("utf-8")
        params = _without_none({"bookmark": bookmark, "path": path, "data": base64.b64encode(data).decode("ascii"),
                                "overwrite": overwrite})
        return self._context.request("bookmarks.write", params)

    def create_folder(self, bookmark, path):
        return self._context.request("bookmarks.createFolder", {"bookmark": bookmark, "path": path})

    def move(self, bookmark, source, destination):
        return self._context.request("bookmarks.move", {"bookmark": bookmark, "from": source, "to": destination})

    def trash(self, bookmark, path):
        return self._context.request("bookmarks.trash", {"bookmark": bookmark, "path": path})["path"]


class Donations:
    """The owner's donation log (the host donates every successful run itself)."""

    def __init__(self, context):
        self._context = context

    def donate(self, intent, parameters=None, response=None, identifier=None, group_identifier=None):
        params = _without_none({"intent": intent, "parameters": parameters, "response": response,
                                "identifier": identifier, "groupIdentifier": group_identifier})
        return self._context.request("donations.donate", params)

    def delete(self, identifier=None, group_identifier=None, all=False):
        params = {"all": True} if all else _without_none({"identifier": identifier, "groupIdentifier": group_identifier})
        return self._context.request("donations.delete", params)["deleted"]


def file_bytes(value):
    """The bytes of a `file` parameter value ({"filename", "typeIdentifier", "data": base64})."""
    import base64
    return base64.b64decode(value["data"])


def file_value(filename, data, type_identifier="public.data"):
    """A `file` value to return in a resolution or a response's properties."""
    import base64
    if isinstance(data, str):
        data = data.encode("utf-8")
    return {"filename": filename, "typeIdentifier": type_identifier, "data": base64.b64encode(data).decode("ascii")}


# ---- The plugin: one process, one or more sessions ---------------------------------

class Plugin:
    """Serves the protocol on a channel. `run` builds one on fds 3 and 4."""

    def __init__(self, plugin_id, version, intents, activities=(), reusable=True, channel=None):
        self.plugin_id, self.version = plugin_id, version
        self.intents = {}
        for handler in intents:
            if not handler.name:
                raise ValueError("%s has no `name`: set it to the intent's name in the manifest" % type(handler).__name__)
            self.intents[handler.name] = handler
        self.activities = {a.activity_type: a for a in activities}
        self.reusable = reusable
        self.channel = channel
        self.mode = os.environ.get("EXTRUN_MODE", "extension")
        self.cancelled = False
        self.context = Context(self)
        self._next_id = 0
        self._answers = {}
        self._fruitless_polls = 0
        self._waits = 0

    # -- sending

    def notify(self, method, params):
        self.channel.send({"jsonrpc": "2.0", "method": method, "params": params})

    def request(self, method, params):
        """A request of the plugin's own (§5.6): waits for the host's answer."""
        self._next_id += 1
        request_id = "extrun-py-%d" % self._next_id
        self.channel.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        while True:
            message = self.channel.receive()
            if message is None:
                raise RPCError(CANCELLED, "the host closed the channel before it answered %s" % method)
            if isinstance(message, _Invalid):
                continue
            if "method" not in message:
                if message.get("id") == request_id:
                    if "error" in message:
                        error = message["error"] if isinstance(message["error"], dict) else {}
                        kind = ServiceError if error.get("code") == SERVICE_ERROR else RPCError
                        raise kind(error.get("code", INTERNAL_ERROR), error.get("message", ""), error.get("data"))
                    return message.get("result")
                continue  # an answer to nothing we asked: ignore it
            if message.get("id") is None:
                self.notification(message)
            else:  # a host request cannot come while one of its own is outstanding; keep it for later
                self.channel.pending.insert(0, message)
                raise RPCError(INTERNAL_ERROR, "the host sent %s before it answered %s" % (message.get("method"), method))

    def take_notifications(self):
        """Handles the notifications queued by a poll; keeps the rest in order."""
        keep = []
        for message in self.channel.pending:
            if isinstance(message, dict) and "method" in message and message.get("id") is None:
                self.notification(message)
            else:
                keep.append(message)
        self.channel.pending[:] = keep

    def notification(self, message):
        if message.get("method") == "cancel":
            self.cancelled = True
            reason = (message.get("params") or {}).get("reason") if isinstance(message.get("params"), dict) else None
            print("%s: cancelled by the host (%s)" % (self.plugin_id, reason), file=sys.stderr)

    # -- the loop

    def serve(self):
        """Answers the host's requests until end of file on the channel."""
        while True:
            message = self.channel.receive()
            if message is None:
                return
            if isinstance(message, _Invalid):
                self.channel.send({"jsonrpc": "2.0", "id": None, "error": {"code": message.code, "message": message.message}})
                continue
            method, request_id = message.get("method"), message.get("id")
            if method is None:
                continue  # a response nobody waits for
            if request_id is None:
                self.notification(message)
                continue
            if method == "shutdown":  # reserved: this host does not send it
                self.channel.send({"jsonrpc": "2.0", "id": request_id, "result": None})
                raise SystemExit(0)
            try:
                if self.cancelled:
                    raise RPCError(CANCELLED, "cancelled by the host")
                reply = {"jsonrpc": "2.0", "id": request_id, "result": self.answer(method, message.get("params"))}
            except RPCError as error:
                reply = {"jsonrpc": "2.0", "id": request_id, "error": error.to_json()}
            except Exception as error:  # a handler failed: the host reports pluginError with the message
                import traceback
                traceback.print_exc(file=sys.stderr)
                reply = {"jsonrpc": "2.0", "id": request_id,
                         "error": {"code": INTERNAL_ERROR, "message": "%s: %s" % (type(error).__name__, error)}}
            self.channel.send(reply)
            if method == "session":
                self.poll_after(message.get("params"))

    # Polls after a session answer that found nothing, in a row, before polling stops (then
    # only every PROBE_EVERY-th wait polls, until one finds something), as the Swift SDK does.
    MAX_FRUITLESS_POLLS = 16
    PROBE_EVERY = 8
    MAX_POLL_AFTER_US = 1000

    def poll_after(self, params):
        """The host's `pollAfterUs` (§15.1): reads for the next request without sleeping for
        that long (at most MAX_POLL_AFTER_US), while a CPU is free for it, as the host says."""
        micros = params.get("pollAfterUs") if isinstance(params, dict) else None
        if not isinstance(micros, int) or isinstance(micros, bool) or micros <= 0 or self.channel.pending:
            return
        self._waits += 1
        if self._fruitless_polls >= self.MAX_FRUITLESS_POLLS and self._waits % self.PROBE_EVERY:
            return
        if self.channel.arrives_within(min(micros, self.MAX_POLL_AFTER_US) / 1e6):
            self._fruitless_polls = 0
        else:
            self._fruitless_polls += 1

    def answer(self, method, params):
        if params is None:
            params = {}
        if not isinstance(params, dict):
            raise RPCError(INVALID_PARAMS, "%s: params must be an object" % method)
        if method == "initialize":
            return self.initialize(params)
        if method == "continue":
            return self.continue_activity(params)
        if method not in ("resolve", "confirm", "handle", "options", "session"):
            raise RPCError(METHOD_NOT_FOUND, "%s does not know the method %r" % (self.plugin_id, method))
        handler = self.handler(params.get("intent"))
        values = params.get("parameters") or {}
        if not isinstance(values, dict):
            raise RPCError(INVALID_PARAMS, "%s: parameters must be an object" % method)
        if method == "resolve":
            return handler.resolve(params.get("parameter"), dict(values), self.context)
        if method == "confirm":
            return handler.confirm(dict(values), self.context)
        if method == "handle":
            return handler.handle(dict(values), self.context)
        if method == "options":
            sections = handler.options(params.get("parameter"), dict(values), params.get("search"), self.context)
            return sections if isinstance(sections, dict) else {"sections": list(sections or [])}
        return self.session(handler, params)

    def handler(self, intent):
        if intent not in self.intents:
            raise RPCError(UNKNOWN_INTENT, "%s does not handle the intent %r" % (self.plugin_id, intent))
        return self.intents[intent]

    def initialize(self, params):
        if params.get("protocolVersion") != PROTOCOL_VERSION:
            raise RPCError(INVALID_PARAMS, "this plugin speaks protocol version %d only" % PROTOCOL_VERSION)
        if params.get("mode") in ("extension", "in-app"):
            self.mode = params["mode"]
        self.cancelled = False
        result = {"protocolVersion": PROTOCOL_VERSION, "plugin": {"id": self.plugin_id, "version": self.version},
                  "intents": list(self.intents)}
        if self.reusable:
            result["reusable"] = True
            result["session"] = True
        return result

    def continue_activity(self, params):
        activity = params.get("activity") or {}
        interaction = params.get("interaction")
        kind = activity.get("activityType")
        if kind in self.activities:
            return self.activities[kind].continue_activity(activity, interaction, self.context)
        intent = (interaction or {}).get("intent") or kind
        return self.handler(intent).continue_in_app(activity, interaction, self.context)

    def session(self, handler, params):
        """A later session in one request (§15.1): resolve in order, stop where the host must act."""
        values = dict(params.get("parameters") or {})
        resolutions = []
        for entry in params.get("resolve") or []:
            name = entry.get("parameter")
            parent = entry.get("parent")
            if parent is not None and (parent.get("parameter") not in values
                                       or values[parent.get("parameter")] != parent.get("value")):
                values.pop(name, None)
                continue
            result = handler.resolve(name, dict(values), self.context)
            resolutions.append({"parameter": name, "result": result})
            kind = result.get("result") if isinstance(result, dict) else None
            if kind == "success":
                if result.get("value") is None:
                    values.pop(name, None)
                else:
                    values[name] = result["value"]
            if kind not in ("success", "notRequired") or (entry.get("required") and name not in values):
                return {"resolutions": resolutions}
        confirm = handler.confirm(dict(values), self.context)
        answer = {"resolutions": resolutions, "confirm": confirm}
        if params.get("handle") and isinstance(confirm, dict) and confirm.get("code") in ("ready", "success"):
            answer["handle"] = handler.handle(dict(values), self.context)
        return answer


def run(plugin_id, version, intents, activities=(), reusable=True):
    """Serves the protocol on the fds of EXTRUN_PROTOCOL_FDS (3 and 4) and exits:
    0 at the end of the channel, 70 when what the host sends is not frames,
    64 when started by hand (outside the host).

    reusable=True declares warm reuse (docs/protocol.md §15): a host that keeps
    processes warm may run further sessions in this process, so keep no state
    of one intent into the next; pass False if your handlers must."""
    try:
        read_fd, write_fd = (int(fd) for fd in os.environ.get("EXTRUN_PROTOCOL_FDS", "3,4").split(","))
        os.fstat(read_fd), os.fstat(write_fd)
    except (OSError, ValueError):
        print("%s is an extrun plugin: it speaks the extrun protocol on fds 3 and 4.\n"
              "Run it through the host, e.g. `extrun handle intent.json` (docs/protocol.md)." % plugin_id, file=sys.stderr)
        sys.exit(64)
    plugin = Plugin(plugin_id, version, intents, activities, reusable, Channel(read_fd, write_fd))
    try:
        plugin.serve()
    except BrokenPipeError:
        pass  # the host is gone: nobody is left to answer
    except FramingError as error:
        print("%s: protocol error: %s" % (plugin_id, error), file=sys.stderr)
        sys.exit(70)
    sys.exit(0)
