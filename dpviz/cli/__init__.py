"""Command line: ``python -m dpviz run|list|show|delete|…`` (`main`, and `build_parser` behind it).

The package re-exports `dpviz.cli.main`.
"""

from __future__ import annotations

from dpviz.cli.main import build_parser, main  # noqa: F401

__all__ = ["build_parser", "main"]
