#!/usr/bin/env python3
"""Prints the Nth (1-based) ```sh block of README.md: the smoke test runs
the README's own examples against the stack, so they stay valid."""
import re
import sys

blocks = re.findall(r"^```sh\n(.*?)^```", open("README.md", encoding="utf-8").read(), re.S | re.M)
n = int(sys.argv[1])
if not 1 <= n <= len(blocks):
    sys.exit(f"README.md has {len(blocks)} sh blocks, not {n}")
print(blocks[n - 1], end="")
