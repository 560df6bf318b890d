#!/usr/bin/env python3
"""ShoutText: an extrun plugin in plain Python 3 (standard library only).

This is the reference implementation of docs/protocol.md: it relies on
nothing but that document, not on the Swift SDK. In short:

  - The host starts this file as a child process. It reads the host's
    messages from fd 3 and writes its own to fd 4 (EXTRUN_PROTOCOL_FDS="3,4").
    stdout and stderr are only captured as log text (`extrun handle --verbose`
    shows them), so a print() cannot corrupt the protocol.
  - Every message is JSON-RPC 2.0, framed like LSP:
        Content-Length: <N>\r\n\r\n<N bytes of UTF-8 JSON>
  - The host sends `initialize`, `resolve` once per manifest parameter,
    `confirm`, `handle`; then it closes fd 3 and the plugin exits with 0.
"""

import json
import os
import sys

PLUGIN_ID = "com.example.python-uppercase"  # must be the manifest's id
PLUGIN_VERSION = "1.0.0"
PROTOCOL_VERSION = 1
INTENT = "ShoutText"
PROMPT = "Which text should I shout?"

# JSON-RPC 2.0 error codes, and extrun's own (-32001, -32002).
PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS = -32700, -32600, -32601, -32602
UNKNOWN_INTENT, CANCELLED = -32001, -32002

MAX_HEADER_BYTES = 1024   # the header block, without the blank line that ends it
MAX_FRAME_BYTES = 64 << 20


class FramingError(Exception):
    """The byte stream is not a sequence of frames: it cannot be trusted any more."""


class RPCError(Exception):
    """An error answer to a request."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code, self.message = code, message


# ---- Framing ------------------------------------------------------------------

def read_frames(fd):
    """Yields the body (bytes) of each frame on fd, until end of file.

    Read boundaries mean nothing on a pipe: one read may hold part of a
    frame, or several frames, so bytes are buffered until a frame is whole."""
    buffer = bytearray()
    while True:
        chunk = os.read(fd, 1 << 16)
        if not chunk:  # end of file: the host closed its end
            if buffer:
                raise FramingError("end of file in the middle of a frame")
            return
        buffer += chunk
        while True:  # take every whole frame out of the buffer
            end = buffer.find(b"\r\n\r\n", 0, MAX_HEADER_BYTES + 4)
            if end < 0:
                if len(buffer) >= MAX_HEADER_BYTES + 4:
                    raise FramingError("frame header too long")
                break  # the header is not all here yet
            length = content_length(bytes(buffer[:end]))
            start = end + 4
            if len(buffer) < start + length:
                break  # the body is not all here yet
            body = bytes(buffer[start:start + length])
            del buffer[:start + length]
            yield body


def content_length(header):
    """The body length named by a header block ("Name: value" lines, ASCII)."""
    if not header.isascii():
        raise FramingError("frame header is not ASCII")
    length = None
    for line in header.decode("ascii").split("\r\n"):
        name, colon, value = line.partition(":")
        if not colon:
            raise FramingError(f"malformed header line {line!r}")
        if name.strip().lower() == "content-length":  # other fields are ignored
            if not value.strip().isdigit():
                raise FramingError(f"invalid Content-Length {value.strip()!r}")
            length = int(value)
    if length is None:
        raise FramingError("frame header has no Content-Length")
    if length > MAX_FRAME_BYTES:
        raise FramingError(f"frame of {length} bytes is too large")
    return length


def send(message):
    """Frames one message and writes all of it to fd 4."""
    body = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    for data in (b"Content-Length: %d\r\n\r\n" % len(body), memoryview(body)):
        while data:  # a write may take only part of the bytes
            data = data[os.write(OUT_FD, data):]


def notify(method, params):
    """A notification: no id, never answered."""
    send({"jsonrpc": "2.0", "method": method, "params": params})


# ---- The intent ---------------------------------------------------------------

def resolve(parameter, values):
    """Resolves one parameter; `values` holds every parameter's current value."""
    if parameter != "text":
        return {"result": "notRequired"}
    text = values.get("text")  # the host has checked that it is a string
    if text is None:
        return {"result": "needsValue", "prompt": PROMPT}
    if not text.strip():
        return {"result": "unsupported", "reason": "empty", "message": "Please enter some text to shout"}
    return {"result": "success", "value": text}


def handle(values):
    result = values.get("text", "").upper() + "!"
    notify("log", {"level": "info", "message": f"shouting {len(result)} characters"})
    return {"code": "success", "properties": {"result": result}, "dialog": {"full": result}}


def answer(method, params):
    """The result of one request from the host, or an RPCError."""
    if not isinstance(params, dict):
        raise RPCError(INVALID_PARAMS, f"{method}: params must be an object")
    if method == "initialize":
        if params.get("protocolVersion") != PROTOCOL_VERSION:
            raise RPCError(INVALID_PARAMS, f"this plugin speaks protocol version {PROTOCOL_VERSION} only")
        return {"protocolVersion": PROTOCOL_VERSION,
                "plugin": {"id": PLUGIN_ID, "version": PLUGIN_VERSION},
                "intents": [INTENT]}
    if method in ("resolve", "confirm", "handle"):
        if params.get("intent") != INTENT:
            raise RPCError(UNKNOWN_INTENT, f"{PLUGIN_ID} does not handle the intent {params.get('intent')!r}")
        values = params.get("parameters") or {}
        if method == "resolve":
            return resolve(params.get("parameter"), values)
        if method == "confirm":
            return {"code": "ready"}  # nothing to check before handling
        return handle(values)
    raise RPCError(METHOD_NOT_FOUND, f"{PLUGIN_ID} does not know the method {method!r}")


# ---- The message loop ---------------------------------------------------------

def serve():
    cancelled = False
    for body in read_frames(IN_FD):
        try:
            message = json.loads(body)  # json.loads takes UTF-8 bytes
        except ValueError as error:
            send({"jsonrpc": "2.0", "id": None, "error": {"code": PARSE_ERROR, "message": str(error)}})
            continue
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            send({"jsonrpc": "2.0", "id": None, "error": {"code": INVALID_REQUEST, "message": "not a JSON-RPC 2.0 message"}})
            continue
        method, request_id = message.get("method"), message.get("id")
        if method is None:
            continue  # a response: this plugin sends no requests, so none is expected
        if request_id is None:
            # A notification. `cancel` means: stop, the host will not wait for the
            # answer. Our work takes no time, so there is never anything to stop;
            # we refuse whatever request might still come. Others are ignored.
            if method == "cancel":
                cancelled = True
                print(f"cancelled by the host: {(message.get('params') or {}).get('reason')}", file=sys.stderr)
            continue
        if method == "shutdown":  # reserved: this host does not send it
            send({"jsonrpc": "2.0", "id": request_id, "result": None})
            sys.exit(0)
        try:
            if cancelled:
                raise RPCError(CANCELLED, "cancelled by the host")
            reply = {"jsonrpc": "2.0", "id": request_id, "result": answer(method, message.get("params"))}
        except RPCError as error:
            reply = {"jsonrpc": "2.0", "id": request_id, "error": {"code": error.code, "message": error.message}}
        send(reply)


def main():
    global IN_FD, OUT_FD
    IN_FD, OUT_FD = (int(fd) for fd in os.environ.get("EXTRUN_PROTOCOL_FDS", "3,4").split(","))
    try:
        os.fstat(IN_FD), os.fstat(OUT_FD)
    except OSError:  # started by hand, not by the host
        print(f"{PLUGIN_ID} is an extrun plugin: it speaks the extrun protocol on fds {IN_FD} and {OUT_FD}.\n"
              "Run it through the host, e.g. `extrun handle intent.json` (see docs/protocol.md).", file=sys.stderr)
        sys.exit(64)
    try:
        serve()
    except BrokenPipeError:
        pass  # the host is gone: nobody is left to answer
    except FramingError as error:
        print(f"{PLUGIN_ID}: protocol error: {error}", file=sys.stderr)
        sys.exit(70)
    sys.exit(0)  # end of file on fd 3: the host is done with us


if __name__ == "__main__":
    main()
