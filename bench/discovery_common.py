"""Shared data for the discovery benchmarks: the MetaTool queries and tools, and the split.

The MetaTool / ToolE data (MIT licence) is read from `../shared/data/metatool`, or
`$HERON_METATOOL_DIR`, or `--data DIR`; the scripts stop with a clear message when it is
absent (a clean clone has no `../shared`). The queries are split once by sha256 of the query
text, as the lexical ranker of `tool_search` was tuned: even = tune, odd = test. Every knob of the
discovery engine (model, fusion, thresholds, hierarchy) was chosen on the tune part only.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from heron.discovery import ToolDoc

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = Path(os.environ.get("HERON_METATOOL_DIR", ROOT.parent / "shared/data/metatool"))


@dataclass(frozen=True, slots=True)
class Query:
    text: str
    tool: str
    """The labelled tool's ToolDoc name (sanitised like the catalogue's)."""


def require(data: Path) -> Path:
    if not (data / "data/all_clean_data.csv").exists():
        sys.exit(
            f"MetaTool data not found in {data}: this benchmark reads ../shared/data/metatool "
            "(or $HERON_METATOOL_DIR, or --data DIR), which a clean clone does not have"
        )
    return data


def safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "_-" else "_" for c in name)


def _schema(description: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"query": {"type": "string", "description": description}},
        "required": ["query"],
    }


def metatool_tools(data: Path) -> list[ToolDoc]:
    """The 199 labelled tools of MetaTool."""
    descriptions = json.loads((data / "plugin_des.json").read_text())
    return [
        ToolDoc(
            server="metatool",
            name=safe(name),
            description=text,
            input_schema=_schema(f"What to ask {name}."),
        )
        for name, text in descriptions.items()
    ]


def part(text: str) -> int:
    return int(hashlib.sha256(text.encode()).hexdigest(), 16) % 2


def queries(data: Path) -> tuple[list[Query], list[Query]]:
    """(tune, test): the single-tool queries split by sha256(query) % 2."""
    with (data / "data/all_clean_data.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    tune = [Query(r["Query"], safe(r["Tool"])) for r in rows if part(r["Query"]) == 0]
    test = [Query(r["Query"], safe(r["Tool"])) for r in rows if part(r["Query"]) == 1]
    return tune, test


# Requests in other languages (written for this benchmark) → acceptable MetaTool tools. The tool
# descriptions stay English: this checks cross-lingual matching, the common case of a user
# writing in their language to a catalogue written in English.
MULTILINGUAL: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("明天纽约的天气怎么样？", ("WeatherTool",)),
    ("帮我把100美元换算成人民币", ("ExchangeTool",)),
    ("苹果公司今天的股价是多少？", ("FinanceTool",)),
    ("给我推荐几本适合孩子读的书", ("BookTool",)),
    ("查找关于大语言模型的学术论文", ("ResearchFinder", "ResearchHelper")),
    ("帮我预订一家餐厅，今晚七点两个人", ("RestaurantBookingTool",)),
    ("最近有哪些地震的消息？", ("EarthquakeTool",)),
    ("我想在上海租一套两居室的公寓", ("HouseRentingTool",)),
    ("帮我把销售数据画成柱状图", ("ChartTool",)),
    ("今天有什么国际新闻？", ("NewsTool",)),
    ("把这段话翻译成西班牙语", ("MixerBox_Translate_AI_language_tutor", "speak")),
    ("为这个网址生成一个二维码", ("create_qr_code", "qreator")),
    ("计算 (23+45)*12 等于多少", ("calculator",)),
    ("帮我写一份简历并给出修改建议", ("ResumeTool",)),
    ("在 GitHub 上找关于网络爬虫的开源项目", ("RepoTool",)),
    ("我想找一份数据分析师的工作", ("JobTool",)),
    ("¿Qué tiempo hará mañana en Madrid?", ("WeatherTool",)),
    ("東京でおすすめのホテルを予約したい", ("TripTool",)),
    ("Wie viele Kalorien hat eine Banane?", ("DietTool",)),
    ("Quels sont les derniers titres de l'actualité ?", ("NewsTool",)),
)


# Requests for the reference MCP servers' real tools (written for this benchmark) → acceptable
# qualified names. Servers here have several tools each, where hierarchical matching can help.
MCP_QUERIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("show me what is inside config.yaml", ("filesystem__read_text_file", "filesystem__read_file")),
    ("read the first 20 lines of the log file", ("filesystem__read_text_file",)),
    ("save this text to notes.txt", ("filesystem__write_file",)),
    ("replace the word foo with bar in main.py", ("filesystem__edit_file",)),
    ("make a new folder called reports", ("filesystem__create_directory",)),
    (
        "what files are in the src folder",
        ("filesystem__list_directory", "filesystem__list_directory_with_sizes"),
    ),
    ("which files in this folder are the biggest", ("filesystem__list_directory_with_sizes",)),
    ("show the whole folder structure as a tree", ("filesystem__directory_tree",)),
    ("rename draft.md to final.md", ("filesystem__move_file",)),
    ("find every file whose name ends in .csv", ("filesystem__search_files",)),
    ("when was report.pdf last modified", ("filesystem__get_file_info",)),
    ("which directories am I allowed to access", ("filesystem__list_allowed_directories",)),
    ("look at this photo file", ("filesystem__read_media_file",)),
    ("open these three files together", ("filesystem__read_multiple_files",)),
    ("what time is it in Tokyo right now", ("time__get_current_time",)),
    ("if it is 9am in London what time is it in New York", ("time__convert_time",)),
    ("remember that Alice works at Acme", ("memory__create_entities", "memory__add_observations")),
    ("record that Bob is Alice's manager", ("memory__create_relations",)),
    ("forget everything about project X", ("memory__delete_entities",)),
    ("what do you remember about Alice", ("memory__search_nodes", "memory__open_nodes")),
    ("show the whole knowledge graph", ("memory__read_graph",)),
    ("think through this problem step by step", ("sequential-thinking__sequentialthinking",)),
    ("add 17 and 25", ("everything__get-sum",)),
    ("repeat back what I say", ("everything__echo",)),
    ("print the environment variables of the server", ("everything__get-env",)),
    ("compress this file with gzip", ("everything__gzip-file-as-resource",)),
)
