"""Markets: `fx_rates` (ECB reference rates through Frankfurter) and `stock_quote` (Stooq's CSV
quote endpoint).

Stocks come from Stooq because it is the one widely used quote source with a plain keyless CSV
endpoint (Yahoo's JSON API needs cookies and a crumb; Alpha Vantage and others need a key).
Stooq gives delayed end-of-session or intraday quotes and no guarantees; should it start asking
for a key, give its source a `Credential(env=..., query="apikey")`.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
from collections.abc import Callable, Mapping
from typing import Annotated
from urllib.parse import quote

from pydantic import Field

from heron.connectors.http_api import ApiError, HttpApi
from heron.connectors.public_data.sources import json_object, source_line
from heron.tools.definition import Tool, ToolResult
from heron.tools.function_tool import tool

__all__ = ["market_tools"]

_QUOTE_COLUMNS = ("Symbol", "Date", "Time", "Open", "High", "Low", "Close", "Volume")

Currency = Annotated[str, Field(pattern=r"^[A-Z]{3}$")]


def market_tools(apis: Mapping[str, HttpApi], base_of: Callable[[str], str]) -> list[Tool]:
    """`fx_rates` (the `frankfurter` source) and `stock_quote` (`stooq`)."""

    @tool(
        read_only=True,
        idempotent=True,
        open_world=True,
        owner="builtin",
        examples=[
            {"base": "USD", "symbols": ["EUR", "GBP"]},
            {"base": "EUR", "symbols": ["JPY"], "amount": 250, "date": "2024-03-15"},
        ],
    )
    async def fx_rates(
        base: Currency = "EUR",
        symbols: Annotated[list[Currency], Field(min_length=1, max_length=30)] | None = None,
        amount: Annotated[float, Field(gt=0)] = 1.0,
        date: dt.date | None = None,
    ) -> ToolResult:
        """Foreign-exchange reference rates (European Central Bank, via the keyless Frankfurter
        API), latest or for a past date, optionally converting an amount. These are daily
        reference rates published around 16:00 CET on working days — not live market prices.
        For a weekend or holiday the result names the working day actually used.

        Returns: one line per currency (`1 USD = 0.92 EUR`; with `amount`, also the converted
        amount, computed here as amount × rate) and the rates' date. Codes the source does not
        know are listed as unavailable. About 0.5 s; cached for an hour.

        Args:
            base: ISO 4217 code of the base currency, e.g. `USD`.
            symbols: Target currencies, e.g. `["EUR", "GBP"]`; omit for all available.
            amount: An amount in `base` to convert, e.g. `250`.
            date: A past date (YYYY-MM-DD) for historical rates, e.g. `2024-03-15`.
        """
        params = {"base": base} | ({"symbols": ",".join(symbols)} if symbols else {})
        path = date.isoformat() if date else "latest"
        try:
            response, document = await json_object(apis["frankfurter"], path, params, "rates")
            rates = document["rates"]
            if not isinstance(rates, dict) or not all(
                isinstance(v, int | float) for v in rates.values()
            ):
                raise response.bad("'rates' is not an object of numbers")
        except ApiError as exc:
            unknown = exc.kind in ("not_found", "rejected")
            return exc.to_result(hint=" (an unknown currency code?)" if unknown else "")
        day = str(document.get("date", "?"))
        lines = [f"ECB reference rates of {day} (base {base}):"]
        for code, rate in sorted(rates.items()):
            converted = f"; {amount:g} {base} = {amount * rate:,.4f} {code}" if amount != 1 else ""
            lines.append(f"  1 {base} = {rate} {code}{converted}")
        missing = sorted(set(symbols or ()) - set(rates) - {base})
        if missing:
            lines.append(f"Unavailable: {', '.join(missing)}")
        if date and day != date.isoformat():
            lines.append(f"Note: no rates were published on {date}; these are of {day}.")
        lines.append(source_line(response, base_url := base_of("frankfurter")))
        data = {"base": base, "date": day, "rates": rates, "amount": amount, "unavailable": missing}
        return ToolResult.ok("\n".join(lines), data=data | {"source": base_url})

    @tool(
        read_only=True,
        idempotent=True,
        open_world=True,
        owner="builtin",
        examples=[{"symbols": ["aapl.us"]}, {"symbols": ["msft.us", "sap.de", "^spx"]}],
    )
    async def stock_quote(
        symbols: Annotated[
            list[Annotated[str, Field(pattern=r"^[A-Za-z0-9^._-]{1,20}$")]],
            Field(min_length=1, max_length=10),
        ],
    ) -> ToolResult:
        """Latest stock, index or ETF quotes from Stooq (keyless CSV; delayed, no guarantee of
        timeliness — never use for trading). Symbols use Stooq's form: ticker plus market,
        e.g. `aapl.us`, `sap.de`, `vod.uk`; indices like `^spx`. Cannot give history or
        fundamentals. One request per symbol (about 0.5 s each); cached for a minute.

        Returns: per symbol the date and time of the quote, open, high, low, close and volume,
        or "no data" when Stooq does not know the symbol.

        Args:
            symbols: Stooq symbols, e.g. `["aapl.us", "msft.us"]`.
        """
        quotes: list[dict[str, str]] = []
        lines: list[str] = []
        try:
            for symbol in symbols:
                path = f"q/l/?s={quote(symbol.lower(), safe='^.')}&f=sd2t2ohlcv&h&e=csv"
                response = await apis["stooq"].get(path)
                text = response.text()
                if "exceeded the daily hits limit" in text.lower():
                    raise ApiError(
                        "rate_limited", "stooq: the daily request limit is used up", source="stooq"
                    )
                rows = list(csv.DictReader(io.StringIO(text)))
                if len(rows) != 1 or not set(_QUOTE_COLUMNS) <= set(rows[0]):
                    raise response.bad(f"not the quote CSV; it began with {text[:60]!r}")
                row = {key: rows[0][key] or "" for key in _QUOTE_COLUMNS}
                quotes.append(row)
                if row["Close"] in ("N/D", ""):
                    lines.append(f"{row['Symbol']}: no data (unknown symbol, or no trades yet)")
                else:
                    lines.append(
                        f"{row['Symbol']}: close {row['Close']} (open {row['Open']}, high "
                        f"{row['High']}, low {row['Low']}, volume {row['Volume']}) at "
                        f"{row['Date']} {row['Time']}"
                    )
        except ApiError as exc:
            return exc.to_result()
        lines.append(source_line(response, base_of("stooq")))
        return ToolResult.ok("\n".join(lines), data={"quotes": quotes})

    return [fx_rates, stock_quote]
