"""Printing: results on stdout (tables, or JSON with --json), progress and messages on stderr."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import BaseModel
from rich.console import Console
from rich.table import Table

out = Console(soft_wrap=True, highlight=False)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def to_jsonable(value: Any) -> Any:
    if isinstance(value, BaseModel):
        dumped = value.model_dump(by_alias=True, exclude_none=True)
        if "dockStatusId" in dumped:
            dumped["dock-statusId"] = dumped["dockStatusId"]
        return dumped
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    return value


def print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(to_jsonable(value), indent=2, sort_keys=False) + "\n")
    sys.stdout.flush()


def table(columns: Sequence[str], rows: Iterable[Sequence[Any]], title: str | None = None) -> None:
    t = Table(title=title, show_edge=False, header_style="bold")
    for column in columns:
        t.add_column(column)
    for row in rows:
        t.add_row(*("" if v is None else str(v) for v in row))
    out.print(t)


def fields(pairs: Iterable[tuple[str, Any]]) -> None:
    t = Table.grid(padding=(0, 2))
    t.add_column(style="bold")
    t.add_column()
    for key, value in pairs:
        if value not in (None, "", []):
            t.add_row(key, str(value))
    out.print(t)
