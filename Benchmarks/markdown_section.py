"""The command line the table writers share (summary-table.py, store-table.py,
fleet-table.py): `SCRIPT [--write FILE] INPUT...`.

Without --write the rendered text goes to stdout. With --write it replaces what stands
between the lines `<!-- NAME:begin -->` and `<!-- NAME:end -->` of FILE
(docs/benchmarks.md), so that the figures there are the runs' own, never typed by hand.
FILE must hold each line once, the begin before the end; otherwise nothing is written.
"""
import sys


def main(name, render, usage, argv=None):
    args = sys.argv[1:] if argv is None else argv
    target = None
    if args[:1] == ["--write"]:
        if len(args) < 2:
            sys.exit(usage)
        target, args = args[1], args[2:]
    if not args:
        sys.exit(usage)
    text = render(args)
    if target is None:
        sys.stdout.write(text)
        return
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    document = open(target).read()
    if document.count(begin) != 1 or document.count(end) != 1 or document.index(begin) > document.index(end):
        sys.exit(f"{target}: needs one line {begin} before one line {end}; nothing was written")
    head, rest = document.split(begin, 1)
    _, tail = rest.split(end, 1)
    open(target, "w").write(head + begin + "\n" + text + end + tail)
    print(f"{target}: the {name} section rewritten from {len(args)} file(s)", file=sys.stderr)
