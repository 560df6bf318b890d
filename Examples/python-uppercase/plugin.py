#!/usr/bin/env python3
"""ShoutText: an extrun plugin in Python 3, on the extrun_plugin module.

extrun_plugin.py (SDKs/python in the extrun repository) is one file of
standard-library Python that speaks docs/protocol.md: it lives beside this
script, in the plugin's folder, so that the host signs it with the plugin and
Python finds it when the sandbox starts the script. Here it is a copy of
SDKs/python/extrun_plugin.py (a file, not a link, so that a copy of this folder
works anywhere; a test keeps the two identical).

To make it yours: the id in extrun.run(...) below and the manifest's "id", the
class's name attribute and the manifest's intent "name", and what handle()
answers.
"""

import sys

sys.dont_write_bytecode = True  # a __pycache__ folder would be a file added to the signed plugin
import extrun_plugin as extrun  # noqa: E402 (after the line above on purpose)


class ShoutText(extrun.Intent):
    name = "ShoutText"  # the intent's name in manifest.json

    def resolve(self, parameter, values, context):
        if parameter != "text":
            return extrun.Resolution.not_required()
        text = values.get("text")  # the host has checked that it is a string
        if text is None:
            return extrun.Resolution.needs_value("Which text should I shout?")
        if not text.strip():
            return extrun.Resolution.unsupported("empty", "Please enter some text to shout")
        return extrun.Resolution.success(text)

    def handle(self, values, context):
        result = values.get("text", "").upper() + "!"
        context.log(f"shouting {len(result)} characters")
        return extrun.Response.success({"result": result}, dialog=result)


if __name__ == "__main__":
    # The id must be the manifest's id. reusable=False: one session per process.
    extrun.run("com.example.python-uppercase", "1.0.0", [ShoutText()], reusable=False)
