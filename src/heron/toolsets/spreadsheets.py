"""Spreadsheet tools over `.xlsx` files in the workspace: `read_spreadsheet`, `write_spreadsheet`.

Files are read and written with openpyxl. A write loads the workbook, changes only the cells
named, and saves through a temporary file, so styles, number formats, column widths, merged
cells, other sheets and untouched cells survive. openpyxl cannot keep charts, images, pivot
tables or macros; a write to a workbook that has any is refused rather than silently losing them.

**Computed values.** openpyxl does not calculate formulas, and LibreOffice is not assumed to be
installed, so heron computes formulas itself with a small evaluator: numbers, cell references
(`B2`, `$B$2`, `'Other sheet'!B2`), ranges (`B2:B9`) inside the functions SUM, AVERAGE, MIN,
MAX and COUNT, the operators `+ - * /`, unary minus and parentheses, with Excel's rules for
empty cells (0 in arithmetic, skipped in ranges), text in ranges (skipped) and errors
(`#DIV/0!`, `#VALUE!`, `#REF!` propagate). Anything else — other functions, comparison,
`&`, `^`, `%`, whole-column references, circular references — is reported as "not computed"
with the reason. A value cached in the file by the program that last calculated it is shown
only labelled as such (possibly stale); it is never passed off as the current value.
"""

from __future__ import annotations

import io
import math
import re
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import openpyxl  # type: ignore[import-untyped]
from openpyxl.utils import get_column_letter, range_boundaries  # type: ignore[import-untyped]
from pydantic import Field

from heron.errors import HeronError
from heron.safety.workspace import Workspace, WorkspaceError, atomic_write
from heron.tools.definition import Tool, ToolResult
from heron.tools.function_tool import tool
from heron.toolsets.document_formats import unpacked_problem

__all__ = ["FormulaEvaluator", "NotComputed", "spreadsheet_tools"]

CellValue = str | int | float | bool | None
MAX_WORKBOOK_BYTES = 50_000_000
"""The largest .xlsx file the tools read (as `read_document`); its parts are bounded after."""
MAX_CELLS_SHOWN = 2000
MAX_RANGE_CELLS = 100_000
_FUNCTIONS = frozenset({"SUM", "AVERAGE", "MIN", "MAX", "COUNT"})
_LOST_PARTS = {"xl/charts/": "charts", "xl/drawings/": "drawings or images"}
_LOST_PARTS |= {"xl/pivotTables/": "pivot tables", "xl/vbaProject.bin": "macros"}
_CELL = r"\$?[A-Za-z]{1,3}\$?[0-9]{1,7}"
_TOKEN = re.compile(
    rf"""\s*(?:
      (?P<number>(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)
    | (?P<func>[A-Za-z][A-Za-z0-9.]*)\s*\(
    | (?P<ref>(?:(?P<sheet>'(?:[^']|'')+'|[A-Za-z_][A-Za-z0-9_.]*)!)?{_CELL}(?::{_CELL})?)
    | (?P<op>[-+*/(),])
    )""",
    re.VERBOSE,
)


class NotComputed(HeronError):
    """A formula outside what the evaluator supports; the message says what."""


class _XlError(HeronError):
    """An Excel error value (`#DIV/0!`), which propagates through a formula."""


@dataclass(frozen=True, kw_only=True, slots=True)
class _Computed:
    value: Any = None
    error: str | None = None
    """An Excel error value such as `#DIV/0!`."""
    not_computed: str | None = None
    """Why the evaluator could not compute it."""


class FormulaEvaluator:
    """Computes formula cells of one openpyxl workbook (see the module docs for the subset)."""

    def __init__(self, workbook: Any) -> None:
        self.workbook = workbook
        self._memo: dict[tuple[str, str], _Computed] = {}
        self._active: set[tuple[str, str]] = set()

    def cell(self, sheet: str, coordinate: str) -> _Computed:
        """The value of one cell: constants as they are, formulas computed."""
        key = (sheet, coordinate.replace("$", "").upper())
        if key in self._memo:
            return self._memo[key]
        if key in self._active:
            raise NotComputed(f"circular reference through {sheet}!{key[1]}")
        if sheet not in self.workbook.sheetnames:
            raise _XlError("#REF!")
        raw = self.workbook[sheet][key[1]].value
        if not (isinstance(raw, str) and raw.startswith("=")):
            if isinstance(raw, str) and raw.startswith("#") and raw.endswith(("!", "?", "A")):
                return _Computed(error=raw)
            if raw is not None and not isinstance(raw, int | float | str):
                return _Computed(not_computed=f"holds a {type(raw).__name__}, not a number")
            return _Computed(value=raw)
        self._active.add(key)
        try:
            result = _Computed(value=_Parser(self, sheet, raw[1:]).parse())
        except _XlError as exc:
            result = _Computed(error=str(exc))
        except NotComputed as exc:
            result = _Computed(not_computed=str(exc))
        finally:
            self._active.discard(key)
        self._memo[key] = result
        return result

    def values(self, sheet: str, ref: str) -> Iterator[_Computed]:
        """Every cell of a range, row by row."""
        min_col, min_row, max_col, max_row = range_boundaries(ref.replace("$", ""))
        if (max_col - min_col + 1) * (max_row - min_row + 1) > MAX_RANGE_CELLS:
            raise NotComputed(f"range {ref} has more than {MAX_RANGE_CELLS:,} cells")
        for row in range(min_row, max_row + 1):
            for col in range(min_col, max_col + 1):
                yield self.cell(sheet, f"{get_column_letter(col)}{row}")


class _Parser:
    """Recursive descent over one formula: expr := term (+|- term)*; term := unary (*|/ unary)*."""

    def __init__(self, evaluator: FormulaEvaluator, sheet: str, text: str) -> None:
        self.evaluator = evaluator
        self.sheet = sheet
        self.text = text
        self.tokens: list[tuple[str, str, str | None]] = []
        position = 0
        while position < len(text.rstrip()):
            match = _TOKEN.match(text, position)
            if match is None or match.end() == position:
                rest = text[position:].strip()
                raise NotComputed(f"unsupported syntax at {rest[:20]!r}")
            kind = next(k for k in ("number", "ref", "func", "op") if match.group(k) is not None)
            self.tokens.append((kind, match.group(kind), match.group("sheet")))
            position = match.end()
        self.index = 0

    def parse(self) -> float:
        value = self._expr()
        if self.index != len(self.tokens):
            raise NotComputed(f"unexpected {self.tokens[self.index][1]!r}")
        return value

    def _peek(self) -> str | None:
        return self.tokens[self.index][1] if self.index < len(self.tokens) else None

    def _take(self) -> tuple[str, str, str | None]:
        if self.index >= len(self.tokens):
            raise NotComputed("the formula ends too early")
        self.index += 1
        return self.tokens[self.index - 1]

    def _expr(self) -> float:
        value = self._term()
        while self._peek() in ("+", "-"):
            op = self._take()[1]
            right = self._term()
            value = value + right if op == "+" else value - right
        return value

    def _term(self) -> float:
        value = self._unary()
        while self._peek() in ("*", "/"):
            op = self._take()[1]
            right = self._unary()
            if op == "/" and right == 0:
                raise _XlError("#DIV/0!")
            value = value * right if op == "*" else value / right
        return value

    def _unary(self) -> float:
        if self._peek() in ("+", "-"):
            sign = -1.0 if self._take()[1] == "-" else 1.0
            return sign * self._unary()
        kind, text, sheet = self._take()
        if kind == "number":
            return float(text)
        if kind == "ref":
            if ":" in text:
                raise _XlError("#VALUE!")  # a range where one value is needed
            return _number(self._cell(text, sheet))
        if kind == "func":
            return self._call(text.upper())
        if text == "(":
            value = self._expr()
            if self._take()[1] != ")":
                raise NotComputed("unbalanced parentheses")
            return value
        raise NotComputed(f"unexpected {text!r}")

    def _cell(self, text: str, sheet: str | None) -> _Computed:
        computed = self.evaluator.cell(*self._where(text, sheet))
        if computed.not_computed:
            raise NotComputed(f"depends on {text}, which is not computed: {computed.not_computed}")
        if computed.error:
            raise _XlError(computed.error)
        return computed

    def _where(self, text: str, sheet: str | None) -> tuple[str, str]:
        ref = text.rsplit("!", 1)[-1]
        name = self.sheet if sheet is None else sheet.strip("'").replace("''", "'")
        return name, ref

    def _call(self, name: str) -> float:
        if name not in _FUNCTIONS:
            raise NotComputed(
                f"function {name} is not supported (only {', '.join(sorted(_FUNCTIONS))})"
            )
        numbers: list[float] = []
        while self._peek() != ")":
            kind, text, sheet = self.tokens[self.index] if self._peek() else ("", "", None)
            following = self.tokens[self.index + 1][1] if self.index + 1 < len(self.tokens) else ")"
            if kind == "ref" and following in (",", ")"):
                self.index += 1
                cells = (
                    list(self.evaluator.values(*self._where(text, sheet)))
                    if ":" in text
                    else [self._cell(text, sheet)]
                )
                for computed in cells:
                    if computed.not_computed:
                        raise NotComputed(f"depends on a cell in {text} that is not computed")
                    if computed.error:
                        raise _XlError(computed.error)
                    # In references Excel counts only real numbers: text, booleans and empty
                    # cells are skipped.
                    if isinstance(computed.value, int | float) and not isinstance(
                        computed.value, bool
                    ):
                        numbers.append(float(computed.value))
            else:
                numbers.append(self._expr())
            if self._peek() == ",":
                self._take()
            elif self._peek() != ")":
                raise NotComputed(f"expected ',' or ')' in {name}(...)")
        self._take()
        if name == "SUM":
            return math.fsum(numbers)
        if name == "COUNT":
            return float(len(numbers))
        if name == "AVERAGE":
            if not numbers:
                raise _XlError("#DIV/0!")
            return math.fsum(numbers) / len(numbers)
        if not numbers:
            return 0.0
        return min(numbers) if name == "MIN" else max(numbers)


def _number(computed: _Computed) -> float:
    value = computed.value
    if value is None:
        return 0.0
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, int | float):
        return float(value)
    try:
        return float(str(value).strip())
    except ValueError:
        raise _XlError("#VALUE!") from None


def _show(value: Any) -> str:
    """A value as a spreadsheet shows it: floats to 15 significant digits, integral ones bare."""
    if isinstance(value, float):
        rounded = float(f"{value:.15g}")
        return str(int(rounded)) if rounded.is_integer() and abs(rounded) < 1e15 else repr(rounded)
    if isinstance(value, str):
        return repr(value)
    return str(value)


# --- the tools ---------------------------------------------------------------------------------

Range = Annotated[
    str, Field(pattern=r"^\$?[A-Za-z]{1,3}\$?[0-9]{1,7}(:\$?[A-Za-z]{1,3}\$?[0-9]{1,7})?$")
]
SheetName = Annotated[str, Field(min_length=1, max_length=31)]


class _SheetError(HeronError):
    """A request the tools refuse, with a sentence for the model."""


def _workbook_path(ws: Workspace, path: str, *, must_exist: bool) -> Path:
    if not path.lower().endswith(".xlsx"):
        raise _SheetError(f"{path!r} is not an .xlsx file; only .xlsx workbooks are supported")
    return ws.resolve(path, must_exist=must_exist)


def _read(ws: Workspace, target: Path, purpose: str) -> bytes:
    """The workbook read once through the workspace's checked open: the parsing below works on
    these bytes, never on the path, which a background command could swap meanwhile."""
    return ws.read_bytes(target, limit=MAX_WORKBOOK_BYTES, purpose=purpose)


def _load(data: bytes, path: str, *, data_only: bool = False) -> Any:
    problem = unpacked_problem(data)
    if problem is not None:
        raise _SheetError(f"{path!r} is refused: {problem}")
    try:
        return openpyxl.load_workbook(io.BytesIO(data), data_only=data_only)
    except (zipfile.BadZipFile, KeyError, OSError, ValueError) as exc:
        raise _SheetError(f"{path!r} is not a readable .xlsx workbook ({exc})") from None


def _sheet(workbook: Any, name: str | None, path: str) -> Any:
    if name is None:
        return workbook.active
    if name not in workbook.sheetnames:
        raise _SheetError(
            f"{path!r} has no sheet {name!r}; sheets: {', '.join(workbook.sheetnames)}"
        )
    return workbook[name]


def _cell_entry(evaluator: FormulaEvaluator, cached: Any, sheet: str, cell: Any) -> dict[str, Any]:
    raw = cell.value
    entry: dict[str, Any] = {"cell": cell.coordinate}
    if not (isinstance(raw, str) and raw.startswith("=") and cell.data_type == "f"):
        entry["value"] = raw if isinstance(raw, CellValue) else str(raw)
        return entry
    entry["formula"] = raw
    computed = evaluator.cell(sheet, cell.coordinate)
    if computed.not_computed is not None:
        entry["not_computed"] = computed.not_computed
        old = cached[sheet][cell.coordinate].value if cached is not None else None
        if old is not None:
            entry["cached_value"] = old
    elif computed.error is not None:
        entry["error"] = computed.error
    else:
        entry["value"] = computed.value
    return entry


def _entry_text(entry: dict[str, Any]) -> str:
    formula = entry.get("formula")
    if formula is None:
        return f"{entry['cell']}={_show(entry['value'])}"
    if "not_computed" in entry:
        shown = f"not computed: {entry['not_computed']}"
        if "cached_value" in entry:
            shown += (
                f"; value cached in the file (from the last program that calculated it, "
                f"possibly stale): {_show(entry['cached_value'])}"
            )
    else:
        shown = entry.get("error") or _show(entry["value"])
    return f"{entry['cell']}={shown}  [{formula}]"


def _has_lost_parts(data: bytes) -> list[str]:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        names = archive.namelist()
    return sorted(
        {what for part, what in _LOST_PARTS.items() if any(n.startswith(part) for n in names)}
    )


def spreadsheet_tools(workspace_root: Path) -> list[Tool]:
    """`read_spreadsheet` and `write_spreadsheet` over `.xlsx` files in the workspace."""
    ws = Workspace(workspace_root)

    @tool(
        read_only=True,
        idempotent=True,
        owner="builtin",
        examples=[
            {"path": "reports/budget.xlsx"},
            {"path": "reports/budget.xlsx", "sheet": "Q1", "range": "A1:D20"},
        ],
    )
    def read_spreadsheet(
        path: str, sheet: SheetName | None = None, range: Range | None = None
    ) -> ToolResult:
        """Read cells of an .xlsx workbook in the workspace, with formulas computed.

        Non-empty cells are listed row by row as `B2=12.5`; a formula cell shows its computed
        value and the formula, `B9=42  [=SUM(B2:B8)]`. Formulas are computed by heron's own
        evaluator (SUM, AVERAGE, MIN, MAX, COUNT, + - * /, cell and cross-sheet references);
        any other formula is marked "not computed" with the reason, and a value cached in the
        file is shown only labelled as possibly stale. Numbers show 15 significant digits, as
        in Excel. Without `range` the sheet's used range is read. At most 2,000 cells are shown
        per call; the result says which rows were shown and the range to read next.

        Returns: the sheet names with their used ranges, then the cells.

        Args:
            path: Workspace path of an .xlsx file, e.g. `reports/budget.xlsx`.
            sheet: Sheet name; omit for the active (first) sheet.
            range: Cells to read in A1 notation, e.g. `A1:D20` or `C7`.
        """
        try:
            target = _workbook_path(ws, path, must_exist=True)
            read = _read(ws, target, "read_spreadsheet")
            workbook = _load(read, path)
            cached = _load(read, path, data_only=True)
            chosen = _sheet(workbook, sheet, path)
        except (_SheetError, WorkspaceError) as exc:
            return ToolResult.fail(str(exc))
        evaluator = FormulaEvaluator(workbook)
        used = chosen.calculate_dimension()
        wanted = (range or used).replace("$", "").upper()
        min_col, min_row, max_col, max_row = range_boundaries(wanted)
        entries: list[dict[str, Any]] = []
        lines: list[str] = []
        last_row = min_row - 1
        for row in chosen.iter_rows(
            min_row=min_row, max_row=max_row, min_col=min_col, max_col=max_col
        ):
            filled = [cell for cell in row if cell.value is not None]
            if len(entries) + len(filled) > MAX_CELLS_SHOWN and entries:
                break
            found = [_cell_entry(evaluator, cached, chosen.title, cell) for cell in filled]
            entries += found
            if found:
                lines.append("  ".join(map(_entry_text, found)))
            last_row = row[0].row if row else last_row
        sheets = ", ".join(f"{s.title} ({s.calculate_dimension()})" for s in workbook.worksheets)
        header = [f"{path}: sheets {sheets}", f"Sheet {chosen.title!r}, cells {wanted}:"]
        if last_row < max_row:
            first, last = get_column_letter(min_col), get_column_letter(max_col)
            header.append(
                f"[rows {min_row}-{last_row} of {min_row}-{max_row} shown (the {MAX_CELLS_SHOWN:,}-"
                f"cell limit); pass range={first}{last_row + 1}:{last}{max_row} to continue]"
            )
        text = "\n".join(header + (lines or ["(no non-empty cells)"]))
        data = {"sheet": chosen.title, "range": wanted, "cells": entries, "last_row": last_row}
        return ToolResult.ok(text, data=data)

    @tool(
        destructive=True,
        owner="builtin",
        examples=[
            {"path": "reports/budget.xlsx", "start": "B2", "rows": [[120, 80], [95.5, None]]},
            {
                "path": "reports/budget.xlsx",
                "sheet": "Q1",
                "start": "B9",
                "rows": [["=SUM(B2:B8)"]],
            },
        ],
    )
    def write_spreadsheet(
        path: str,
        rows: Annotated[list[list[CellValue]], Field(min_length=1, max_length=10_000)],
        start: Range = "A1",
        sheet: SheetName | None = None,
        text_only: bool = False,
    ) -> ToolResult:
        """Write a block of values and formulas into an .xlsx workbook in the workspace,
        starting at cell `start` (row by row, left to right). Creates the file or the sheet
        when missing. Only the cells written change: styles, number formats, other cells and
        other sheets are kept. A `null` in `rows` clears that cell.

        A string starting with `=` is written as a formula, as when typed into Excel, unless
        `text_only` is true (then every string is stored as text exactly as given). Refuses
        files other than .xlsx and workbooks with charts, images, pivot tables or macros
        (which the file library would drop on save).

        Returns: the range written and, for each formula written, its value computed by
        heron's evaluator (or why it could not be computed).

        Args:
            path: Workspace path of the .xlsx file, e.g. `reports/budget.xlsx`.
            rows: Rows of cell values: numbers, text, booleans, null, or formulas like `=B2*C2`.
            start: The top-left cell, e.g. `B2`.
            sheet: Sheet name; omit for the active (first) sheet. A new name adds a sheet.
            text_only: Store strings starting with `=` as text instead of formulas.
        """
        try:
            target = _workbook_path(ws, path, must_exist=False)
            exists = target.exists()
            read = _read(ws, target, "write_spreadsheet") if exists else b""
            if exists and (lost := _has_lost_parts(read)):
                raise _SheetError(
                    f"{path!r} contains {', '.join(lost)}, which would be lost on save; "
                    "nothing was written"
                )
            workbook = _load(read, path) if exists else openpyxl.Workbook()
            if sheet is not None and sheet not in workbook.sheetnames:
                if not exists:
                    workbook.active.title = sheet
                else:
                    workbook.create_sheet(sheet)
            chosen = _sheet(workbook, sheet, path)
        except (_SheetError, WorkspaceError, zipfile.BadZipFile) as exc:
            return ToolResult.fail(str(exc))
        col0, row0, _, _ = range_boundaries(start.replace("$", "").upper())
        width = max(len(row) for row in rows)
        written: list[str] = []
        for r, values in enumerate(rows):
            for c, value in enumerate(values):
                cell = chosen.cell(row=row0 + r, column=col0 + c)
                cell.value = value
                if text_only and isinstance(value, str):
                    cell.data_type = "s"
                if cell.data_type == "f":
                    written.append(cell.coordinate)
        buffer = io.BytesIO()
        workbook.save(buffer)
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(target, buffer.getvalue())
        end = f"{get_column_letter(col0 + width - 1)}{row0 + len(rows) - 1}"
        area = f"{get_column_letter(col0)}{row0}:{end}"
        evaluator = FormulaEvaluator(workbook)
        formulas = [_cell_entry(evaluator, None, chosen.title, chosen[c]) for c in written]
        lines = [f"wrote {sum(map(len, rows))} cells to {chosen.title}!{area} of {path}"]
        if formulas:
            lines.append("Formulas: " + "  ".join(map(_entry_text, formulas)))
        data = {"sheet": chosen.title, "range": area, "created": not exists, "formulas": formulas}
        return ToolResult.ok("\n".join(lines), data=data)

    return [read_spreadsheet, write_spreadsheet]
