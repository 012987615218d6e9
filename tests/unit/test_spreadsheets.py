"""read_spreadsheet / write_spreadsheet on real .xlsx files: formulas computed by heron's
evaluator, never a stale cached value passed off as current, and lossless round trips."""

from __future__ import annotations

import os
import re
import zipfile
from pathlib import Path
from typing import Any

import openpyxl  # type: ignore[import-untyped]
import pytest
from openpyxl.chart import BarChart, Reference  # type: ignore[import-untyped]
from openpyxl.styles import Font, PatternFill  # type: ignore[import-untyped]

from heron import ToolContext, ToolResult
from heron.tools.definition import Tool
from heron.toolsets.spreadsheets import spreadsheet_tools
from support.swaps import call_in_a_thread

CTX = ToolContext(call_id="c0", turn_id="t0")


@pytest.fixture
def tools(tmp_path: Path) -> dict[str, Tool]:
    return {t.spec.name: t for t in spreadsheet_tools(tmp_path)}


async def run(tools: dict[str, Tool], name: str, **arguments: Any) -> ToolResult:
    t = tools[name]
    return await t.execute(t.validate(arguments), CTX)


def cells(result: ToolResult) -> dict[str, dict[str, Any]]:
    return {entry["cell"]: entry for entry in result.data["cells"]}


async def test_written_formulas_are_computed_on_write_and_on_read(tools: dict[str, Tool]) -> None:
    rows = [
        ["Item", "Cost", "Qty"],
        ["pens", 2.5, 4],
        ["paper", 7, 2],
        ["ink", None, "n/a"],
        ["total", "=SUM(B2:B4)", "=B2*C2+B3*C3"],
        ["stats", "=AVERAGE(B2:B4)", "=COUNT(B1:C4)"],
        ["range", "=MAX(B2:B3)-MIN(B2:B3)", "=-(1+2)*3/4"],
    ]
    written = await run(tools, "write_spreadsheet", path="budget.xlsx", rows=rows, sheet="Q1")
    assert written.success, written.error
    assert "wrote 21 cells to Q1!A1:C7 of budget.xlsx" in written.output
    assert "B5=9.5  [=SUM(B2:B4)]" in written.output and "C5=24  [=B2*C2+B3*C3]" in written.output
    read = await run(tools, "read_spreadsheet", path="budget.xlsx")
    got = {k: v.get("value") for k, v in cells(read).items()}
    assert got["B5"] == 9.5 and got["C5"] == 24
    assert got["B6"] == 4.75  # the empty B4 is skipped, not counted as 0
    assert got["C6"] == 4  # numbers only: header text, 'n/a' and the empty cell are not counted
    assert got["B7"] == 4.5 and got["C7"] == -2.25
    assert "A4='ink'" in read.output and "Sheet 'Q1', cells A1:C7:" in read.output


async def test_excel_errors_propagate_and_unsupported_formulas_are_not_computed(
    tools: dict[str, Tool],
) -> None:
    rows = [
        [10, 0, "word"],
        ["=A1/B1", "=A1+C1", "=A2*2"],
        ["=VLOOKUP(1,A1:B2,2)", "=A3+1", "=C4"],
        ["=A1^2", "=A1&B1", "=C3"],
    ]
    result = await run(tools, "write_spreadsheet", path="e.xlsx", rows=rows)
    assert result.success, result.error
    read = cells(await run(tools, "read_spreadsheet", path="e.xlsx"))
    assert read["A2"]["error"] == "#DIV/0!" and read["C2"]["error"] == "#DIV/0!"
    assert read["B2"]["error"] == "#VALUE!"
    assert "function VLOOKUP is not supported" in read["A3"]["not_computed"]
    assert "depends on A3" in read["B3"]["not_computed"]
    assert "circular reference" in read["C3"]["not_computed"]
    assert "unsupported syntax" in read["A4"]["not_computed"]
    for entry in (read["A3"], read["B3"], read["A4"]):
        assert "value" not in entry


async def test_a_cached_value_is_shown_only_labelled_as_possibly_stale(
    tools: dict[str, Tool], tmp_path: Path
) -> None:
    workbook = openpyxl.Workbook()
    workbook.active["A1"] = 5
    workbook.active["B1"] = "=VLOOKUP(5,A1:A1,1)"
    workbook.active["C1"] = "=A1*2"
    path = tmp_path / "cached.xlsx"
    workbook.save(path)
    # Give both formulas the values a spreadsheet program would have cached (C1's is stale).
    with zipfile.ZipFile(path) as archive:
        parts = {name: archive.read(name) for name in archive.namelist()}
    sheet = parts["xl/worksheets/sheet1.xml"].decode()
    sheet = re.sub(r"(<f>VLOOKUP[^<]*</f>)<v\s*/?>(</v>)?", r"\1<v>99</v>", sheet)
    sheet = re.sub(r"(<f>A1\*2</f>)<v\s*/?>(</v>)?", r"\1<v>777</v>", sheet)
    parts["xl/worksheets/sheet1.xml"] = sheet.encode()
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in parts.items():
            archive.writestr(name, data)
    read = await run(tools, "read_spreadsheet", path="cached.xlsx")
    entries = cells(read)
    assert entries["B1"]["cached_value"] == 99 and "value" not in entries["B1"]
    assert "possibly stale): 99" in read.output
    assert entries["C1"]["value"] == 10 and "777" not in read.output


async def test_write_keeps_styles_and_untouched_cells(
    tools: dict[str, Tool], tmp_path: Path
) -> None:
    workbook = openpyxl.Workbook()
    main = workbook.active
    main.title = "Main"
    main["A1"] = "Title"
    main["A1"].font = Font(bold=True, size=14)
    main["B2"] = 1234.5
    main["B2"].number_format = "#,##0.00"
    main["B2"].fill = PatternFill("solid", fgColor="FFFF00")
    main.column_dimensions["A"].width = 30
    main.merge_cells("D1:E1")
    other = workbook.create_sheet("Other")
    other["A1"] = "keep me"
    workbook.save(tmp_path / "styled.xlsx")

    result = await run(tools, "write_spreadsheet", path="styled.xlsx", rows=[[99]], start="B2")
    assert result.success, result.error
    reloaded = openpyxl.load_workbook(tmp_path / "styled.xlsx")
    main = reloaded["Main"]
    assert main["B2"].value == 99
    assert main["B2"].number_format == "#,##0.00" and main["B2"].fill.fgColor.rgb == "00FFFF00"
    assert main["A1"].value == "Title" and main["A1"].font.bold and main["A1"].font.size == 14
    assert main.column_dimensions["A"].width == 30
    assert [str(r) for r in main.merged_cells.ranges] == ["D1:E1"]
    assert reloaded["Other"]["A1"].value == "keep me"


async def test_text_only_stores_an_equals_string_verbatim(
    tools: dict[str, Tool], tmp_path: Path
) -> None:
    rows = [["=not a formula", "=1+1"]]
    await run(tools, "write_spreadsheet", path="t.xlsx", rows=rows, text_only=True)
    sheet = openpyxl.load_workbook(tmp_path / "t.xlsx").active
    assert sheet["A1"].data_type == "s" and sheet["B1"].data_type == "s"
    read = await run(tools, "read_spreadsheet", path="t.xlsx")
    assert "A1='=not a formula'" in read.output and "formula" not in cells(read)["B1"]


async def test_workbooks_with_charts_are_not_written(
    tools: dict[str, Tool], tmp_path: Path
) -> None:
    workbook = openpyxl.Workbook()
    workbook.active.append([1, 2, 3])
    chart = BarChart()
    chart.add_data(Reference(workbook.active, min_col=1, max_col=3, min_row=1))
    workbook.active.add_chart(chart, "E5")
    workbook.save(tmp_path / "chart.xlsx")
    before = (tmp_path / "chart.xlsx").read_bytes()
    result = await run(tools, "write_spreadsheet", path="chart.xlsx", rows=[[5]])
    assert not result.success and "charts" in (result.error or "")
    assert (tmp_path / "chart.xlsx").read_bytes() == before


async def test_refusals_name_the_problem(tools: dict[str, Tool], tmp_path: Path) -> None:
    await run(tools, "write_spreadsheet", path="a.xlsx", rows=[[1]], sheet="Data")
    (tmp_path / "broken.xlsx").write_text("not a zip")
    missing_sheet = await run(tools, "read_spreadsheet", path="a.xlsx", sheet="Nope")
    assert not missing_sheet.success and "sheets: Data" in (missing_sheet.error or "")
    csv = await run(tools, "write_spreadsheet", path="a.csv", rows=[[1]])
    assert not csv.success and "only .xlsx" in (csv.error or "")
    escape = await run(tools, "read_spreadsheet", path="../a.xlsx")
    assert not escape.success
    broken = await run(tools, "read_spreadsheet", path="broken.xlsx")
    assert not broken.success and "not a readable .xlsx" in (broken.error or "")


async def test_cross_sheet_references_are_computed(tools: dict[str, Tool]) -> None:
    await run(tools, "write_spreadsheet", path="x.xlsx", rows=[[3, 4]], sheet="Rates 2024")
    result = await run(
        tools,
        "write_spreadsheet",
        path="x.xlsx",
        rows=[["='Rates 2024'!A1*10", "=SUM('Rates 2024'!A1:B1)", "=Missing!A1"]],
        sheet="Calc",
    )
    formulas = {f["cell"]: f for f in result.data["formulas"]}
    assert formulas["A1"]["value"] == 30 and formulas["B1"]["value"] == 7
    assert formulas["C1"]["error"] == "#REF!"


async def test_a_large_range_is_cut_explicitly_with_the_range_to_continue(
    tools: dict[str, Tool],
) -> None:
    rows: list[list[Any]] = [[n, n * 2] for n in range(1, 1201)]
    await run(tools, "write_spreadsheet", path="big.xlsx", rows=rows)
    first = await run(tools, "read_spreadsheet", path="big.xlsx")
    assert first.data["last_row"] == 1000 and len(first.data["cells"]) == 2000
    assert "[rows 1-1000 of 1-1200 shown" in first.output
    assert "pass range=A1001:B1200 to continue" in first.output
    rest = await run(tools, "read_spreadsheet", path="big.xlsx", range="A1001:B1200")
    assert len(rest.data["cells"]) == 400 and "shown (the" not in rest.output


async def test_floats_show_fifteen_significant_digits(tools: dict[str, Tool]) -> None:
    result = await run(tools, "write_spreadsheet", path="f.xlsx", rows=[[0.1, 0.2, "=A1+B1"]])
    assert "C1=0.3  [=A1+B1]" in result.output
    assert result.data["formulas"][0]["value"] == pytest.approx(0.3)


async def test_a_workbook_that_unpacks_past_the_limit_is_refused(
    tools: dict[str, Tool], tmp_path: Path
) -> None:
    book = openpyxl.Workbook()
    book.active["A1"] = 1
    book.save(tmp_path / "bomb.xlsx")
    with (
        zipfile.ZipFile(tmp_path / "bomb.xlsx", "a", zipfile.ZIP_DEFLATED) as archive,
        archive.open("xl/media/padding.bin", "w", force_zip64=True) as part,
    ):
        for _ in range(130):
            part.write(bytes(2**20))

    result = await run(tools, "read_spreadsheet", path="bomb.xlsx")

    assert not result.success
    assert result.error is not None and "is refused: its parts unpack to" in result.error


@pytest.mark.parametrize("name", ["read_spreadsheet", "write_spreadsheet"])
def test_a_fifo_named_like_a_workbook_is_refused_not_waited_on(
    tools: dict[str, Tool], tmp_path: Path, name: str
) -> None:
    os.mkfifo(tmp_path / "trap.xlsx")  # a command in the workspace can make one; no writer
    arguments = {"path": "trap.xlsx"} | ({"rows": [[1]]} if name == "write_spreadsheet" else {})

    result = call_in_a_thread(tools[name], tmp_path / "trap.xlsx", **arguments)

    assert result is not None, f"{name} waited on a FIFO"
    assert not result.success and "not a regular file (a device, pipe or socket)" in str(
        result.error
    )
