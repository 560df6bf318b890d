#!/usr/bin/env python3
"""A small plugin for the host's interaction tests: a soup shop whose
resolutions need a person (a missing value, a choice, a confirmation), with
a parameter shown only under a condition, dynamic options and phrases.
It runs on SDKs/python/extrun_plugin.py, which the test copies beside it."""
import sys

sys.dont_write_bytecode = True
import extrun_plugin as extrun  # noqa: E402

MENU = [
    {"identifier": "clam-chowder", "title": "Clam Chowder", "subtitle": "New England style", "available": True},
    {"identifier": "tomato", "title": "Tomato Soup", "subtitle": "with basil", "available": True},
    {"identifier": "chili", "title": "Chili", "subtitle": "not available today", "available": False},
    {"identifier": "creme-brulee", "title": "Crème Brûlée Soup", "subtitle": "dessert", "available": True},
]


def soup_value(item):
    return {"identifier": item["identifier"], "title": item["title"], "subtitle": item["subtitle"]}


class OrderSoup(extrun.Intent):
    name = "OrderSoup"

    def resolve(self, name, values, context):
        value = values.get(name)
        if name == "soup":
            if value is None:
                return extrun.Resolution.needs_value("Which soup?")
            if isinstance(value, dict) and value.get("identifier") == "ambiguous":
                return extrun.Resolution.disambiguation([soup_value(MENU[1]), soup_value(MENU[0])], "Which tomato soup?")
            return extrun.Resolution.success(value)
        if name == "quantity":
            if value is None:
                return extrun.Resolution.success(1)
            if value > 10:
                return extrun.Resolution.confirmation_required(value, "Really %d bowls?" % value)
            if value < 1:
                return extrun.Resolution.unsupported("tooFew")
            return extrun.Resolution.success(value)
        if name == "note":
            return extrun.Resolution.success(value) if value is not None else extrun.Resolution.not_required()
        if name == "giftWrap":
            return extrun.Resolution.success(bool(value))
        if name == "giftMessage":
            # Only reached when giftWrap is true (its parent condition).
            if value is None:
                return extrun.Resolution.needs_value("What should the gift card say?")
            return extrun.Resolution.success(value)
        return extrun.Resolution.not_required()

    def options(self, name, values, search, context):
        items = [extrun.option(i["identifier"], i["title"], soup_value(i), subtitle=i["subtitle"]) for i in MENU]
        if search:  # a plain, exact filter: `extrun phrase` must not depend on it
            s = search.lower()
            items = [i for i in items if s in i["title"].lower() or s in i["identifier"]]
        return [extrun.section(items, title="Today's menu")]

    def handle(self, values, context):
        soup = values["soup"]
        item = next((i for i in MENU if i["identifier"] == soup["identifier"]), None)
        if item is not None and not item["available"]:
            return extrun.Response.make("failureOutOfStock", {"soup": soup}, dialog="Sorry, %s is sold out." % soup["title"])
        result = {"soup": soup["identifier"], "quantity": values.get("quantity", 1)}
        for key in ("note", "giftWrap", "giftMessage"):
            if key in values:
                result[key] = values[key]
        return extrun.Response.success(result)


extrun.run("test.soupshop", "1", [OrderSoup()], reusable=False)
