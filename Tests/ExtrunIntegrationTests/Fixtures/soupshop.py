#!/usr/bin/env python3
"""A small plugin for the host's interaction tests: a soup shop whose
resolutions need a person (a missing value, a choice, a confirmation), with
a parameter shown only under a condition, dynamic options and phrases."""
import json
import os
import sys

IN, OUT = 3, 4
buffer = b""
MENU = [
    {"identifier": "clam-chowder", "title": "Clam Chowder", "subtitle": "New England style", "available": True},
    {"identifier": "tomato", "title": "Tomato Soup", "subtitle": "with basil", "available": True},
    {"identifier": "chili", "title": "Chili", "subtitle": "not available today", "available": False},
    {"identifier": "creme-brulee", "title": "Crème Brûlée Soup", "subtitle": "dessert", "available": True},
]


def read_message():
    global buffer
    while b"\r\n\r\n" not in buffer:
        chunk = os.read(IN, 65536)
        if not chunk:
            sys.exit(0)
        buffer += chunk
    header, buffer = buffer.split(b"\r\n\r\n", 1)
    length = int(header.split(b":")[1])
    while len(buffer) < length:
        chunk = os.read(IN, 65536)
        if not chunk:
            sys.exit(0)
        buffer += chunk
    body, buffer = buffer[:length], buffer[length:]
    return json.loads(body)


def send(message):
    body = json.dumps(message).encode()
    os.write(OUT, b"Content-Length: %d\r\n\r\n" % len(body) + body)


def soup_value(item):
    return {"identifier": item["identifier"], "title": item["title"], "subtitle": item["subtitle"]}


def resolve(intent, name, values):
    value = values.get(name)
    if name == "soup":
        if value is None:
            return {"result": "needsValue", "prompt": "Which soup?"}
        if isinstance(value, dict) and value.get("identifier") == "ambiguous":
            return {"result": "disambiguation", "prompt": "Which tomato soup?",
                    "options": [soup_value(MENU[1]), soup_value(MENU[0])]}
        return {"result": "success", "value": value}
    if name == "quantity":
        if value is None:
            return {"result": "success", "value": 1}
        if value > 10:
            return {"result": "confirmationRequired", "value": value, "prompt": "Really %d bowls?" % value}
        if value < 1:
            return {"result": "unsupported", "reason": "tooFew"}
        return {"result": "success", "value": value}
    if name == "note":
        return {"result": "success", "value": value} if value is not None else {"result": "notRequired"}
    if name == "giftWrap":
        return {"result": "success", "value": bool(value)}
    if name == "giftMessage":
        # Only reached when giftWrap is true (its parent condition).
        if value is None:
            return {"result": "needsValue", "prompt": "What should the gift card say?"}
        return {"result": "success", "value": value}
    return {"result": "notRequired"}


def options(name, search):
    items = [soup_value(i) | {"value": soup_value(i)} for i in MENU]
    if search:
        s = search.lower()
        items = [i for i in items if s in i["title"].lower() or s in i["identifier"]] or items
    return {"sections": [{"title": "Today's menu", "items": items}]}


def handle(values):
    soup = values["soup"]
    item = next((i for i in MENU if i["identifier"] == soup["identifier"]), None)
    if item is not None and not item["available"]:
        return {"code": "failureOutOfStock", "properties": {"soup": soup},
                "dialog": {"full": "Sorry, %s is sold out." % soup["title"]}}
    result = {"soup": soup["identifier"], "quantity": values.get("quantity", 1)}
    for key in ("note", "giftWrap", "giftMessage"):
        if key in values:
            result[key] = values[key]
    return {"code": "success", "properties": result}


while True:
    message = read_message()
    if "id" not in message:
        continue
    method, params = message.get("method"), message.get("params") or {}
    if method == "initialize":
        result = {"protocolVersion": 1, "plugin": {"id": "test.soupshop", "version": "1"}, "intents": ["OrderSoup"]}
    elif method == "resolve":
        result = resolve(params["intent"], params["parameter"], params["parameters"])
    elif method == "options":
        result = options(params["parameter"], params.get("search"))
    elif method == "confirm":
        result = {"code": "ready"}
    elif method == "handle":
        result = handle(params["parameters"])
    else:
        send({"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32601, "message": "no " + str(method)}})
        continue
    send({"jsonrpc": "2.0", "id": message["id"], "result": result})
