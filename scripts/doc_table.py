#!/usr/bin/env python3
"""Puts a benchmark's printed table into a document, between markers, so that the tables
in docs/ are what a script printed and never typed by hand.

    some-bench-command | scripts/doc_table.py DOC NAME [--command "what was run"] [--fenced]

DOC holds a block

    <!-- table NAME: the command that printed it -->
    ... (replaced) ...
    <!-- end table NAME -->

and the block's contents become stdin (the table), with the begin marker rewritten to
name the command when `--command` is given. A block that is missing is an error (the
document says where a table goes; this script never guesses). `--check DOC` instead
checks that every begin marker has its end, and names none twice.
"""
import argparse
import re
import sys

BEGIN = re.compile(r"^<!-- table ([A-Za-z0-9_.-]+): (.*) -->$")
END = "<!-- end table {} -->"


def blocks(lines):
    """Yields (name, command, begin index, end index) for every block, or raises."""
    seen = set()
    i = 0
    while i < len(lines):
        m = BEGIN.match(lines[i])
        if m:
            name = m.group(1)
            if name in seen:
                raise ValueError(f"table {name} appears twice")
            seen.add(name)
            try:
                j = lines.index(END.format(name), i + 1)
            except ValueError:
                raise ValueError(f"table {name} (line {i + 1}) has no '{END.format(name)}'")
            yield name, m.group(2), i, j
            i = j
        i += 1


def replace(doc, name, table, command):
    lines = open(doc, encoding="utf-8").read().split("\n")
    for found, old_command, i, j in blocks(lines):
        if found == name:
            head = f"<!-- table {name}: {command or old_command} -->"
            body = table.strip("\n").split("\n")
            lines[i:j + 1] = [head, *body, END.format(name)]
            open(doc, "w", encoding="utf-8").write("\n".join(lines))
            return
    raise ValueError(f"{doc} has no table named {name}: add '<!-- table {name}: COMMAND -->' "
                     f"and '{END.format(name)}' where it goes")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("doc")
    parser.add_argument("name", nargs="?")
    parser.add_argument("--command", help="the command that printed the table")
    parser.add_argument("--check", action="store_true", help="only check the markers")
    parser.add_argument("--fenced", action="store_true",
                        help="stdin is a program's plain output: put it in a code block")
    args = parser.parse_args()
    try:
        if args.check:
            lines = open(args.doc, encoding="utf-8").read().split("\n")
            count = sum(1 for _ in blocks(lines))
            print(f"{args.doc}: {count} generated tables, markers well formed")
            return
        if not args.name:
            parser.error("NAME is required unless --check")
        table = sys.stdin.read()
        if args.fenced:
            table = "```text\n" + table.strip("\n") + "\n```"
        elif "|" not in table:
            raise ValueError("stdin holds no markdown table (--fenced takes plain output)")
        replace(args.doc, args.name, table, args.command)
    except (OSError, ValueError) as error:
        sys.exit(f"doc_table: {error}")


if __name__ == "__main__":
    main()
