"""`weather_forecast`: current weather and a daily forecast from Open-Meteo (forecast and
geocoding APIs)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Annotated, Any

from pydantic import Field

from heron.connectors.http_api import ApiError, HttpApi
from heron.connectors.public_data.sources import json_object, source_line
from heron.tools.definition import Tool, ToolResult
from heron.tools.function_tool import tool

__all__ = ["weather_tools"]

_WMO = {0: "clear sky", 1: "mainly clear", 2: "partly cloudy", 3: "overcast", 45: "fog"}
_WMO |= {48: "rime fog", 51: "light drizzle", 53: "drizzle", 55: "dense drizzle"}
_WMO |= {61: "light rain", 63: "rain", 65: "heavy rain", 71: "light snow", 73: "snow"}
_WMO |= {75: "heavy snow", 80: "rain showers", 81: "rain showers", 82: "violent rain showers"}
_WMO |= {95: "thunderstorm", 96: "thunderstorm with hail", 99: "thunderstorm with heavy hail"}


def _fmt(value: Any, unit: str) -> str:
    return "n/a" if value is None else f"{value} {unit}".replace(" %", "%")


def _sky(code: Any) -> str:
    return _WMO.get(code, f"weather code {code}") if isinstance(code, int) else "sky unknown"


def _weather_text(label: str, document: dict[str, Any]) -> list[str]:
    now, units = document["current"], document.get("current_units") or {}
    day, day_units = document["daily"], document.get("daily_units") or {}
    if (
        not isinstance(now, dict)
        or not isinstance(day, dict)
        or not isinstance(day.get("time"), list)
    ):
        raise ValueError("'current' or 'daily' is not the documented object")

    def unit(key: str, default: str) -> str:
        return str(units.get(key, default))

    lines = [
        f"Weather for {label}, timezone {document.get('timezone', '?')}",
        f"Now ({now.get('time', '?')}): "
        f"{_fmt(now.get('temperature_2m'), unit('temperature_2m', '°C'))}, "
        f"humidity {_fmt(now.get('relative_humidity_2m'), '%')}, precipitation "
        f"{_fmt(now.get('precipitation'), unit('precipitation', 'mm'))}, wind "
        f"{_fmt(now.get('wind_speed_10m'), unit('wind_speed_10m', 'km/h'))}, "
        f"{_sky(now.get('weather_code'))}",
        "Daily:",
    ]
    for i, date in enumerate(day["time"]):
        row = {k: v[i] if isinstance(v, list) and i < len(v) else None for k, v in day.items()}
        lines.append(
            f"  {date}: {row.get('temperature_2m_min')}–"
            f"{_fmt(row.get('temperature_2m_max'), day_units.get('temperature_2m_max', '°C'))}, "
            f"{_fmt(row.get('precipitation_sum'), day_units.get('precipitation_sum', 'mm'))}, "
            f"{_sky(row.get('weather_code'))}"
        )
    return lines


def weather_tools(apis: Mapping[str, HttpApi], base_of: Callable[[str], str]) -> list[Tool]:
    """`weather_forecast` over the `open-meteo` and `open-meteo-geocoding` sources."""

    @tool(
        read_only=True,
        idempotent=True,
        open_world=True,
        owner="builtin",
        examples=[{"place": "Berlin"}, {"latitude": 48.85, "longitude": 2.35, "days": 7}],
    )
    async def weather_forecast(
        place: Annotated[str, Field(min_length=1, max_length=200)] | None = None,
        latitude: Annotated[float, Field(ge=-90, le=90)] | None = None,
        longitude: Annotated[float, Field(ge=-180, le=180)] | None = None,
        days: Annotated[int, Field(ge=1, le=16)] = 3,
    ) -> ToolResult:
        """Current weather and a daily forecast for a place, from Open-Meteo (free, keyless).
        Give either `place` (looked up with Open-Meteo geocoding; the best match is used and
        named in the result) or both `latitude` and `longitude`.

        Returns: the place resolved, the current conditions (temperature, humidity,
        precipitation, wind, sky) and one line per day (min-max temperature, precipitation,
        sky), in the place's local time and metric units. Cannot give past weather or hourly
        detail. About 0.5-2 s; answers are cached for 10 minutes.

        Args:
            place: A place name, e.g. `Berlin` or `Springfield, Illinois`.
            latitude: WGS84 latitude, e.g. `52.52`.
            longitude: WGS84 longitude, e.g. `13.41`.
            days: Number of forecast days (1-16).
        """
        if (latitude is None) != (longitude is None) or (place is None) == (latitude is None):
            return ToolResult.fail("give either place, or both latitude and longitude")
        label = f"{latitude}, {longitude}"
        try:
            if place is not None:
                params = {"name": place, "count": "1", "format": "json"}
                found, places = await json_object(apis["open-meteo-geocoding"], "search", params)
                hits = places.get("results")
                if not hits:
                    return ToolResult.fail(
                        f"Open-Meteo geocoding knows no place named {place!r}; try the city "
                        "name alone, or give latitude and longitude",
                        data={"error": "not_found", "source": "open-meteo-geocoding"},
                    )
                first = hits[0] if isinstance(hits, list) and isinstance(hits[0], dict) else {}
                latitude, longitude = first.get("latitude"), first.get("longitude")
                if not isinstance(latitude, float | int) or not isinstance(longitude, float | int):
                    raise found.bad("a geocoding result without coordinates")
                named = [str(first[k]) for k in ("name", "admin1", "country") if first.get(k)]
                label = f"{', '.join(named)} ({latitude}, {longitude})"
            current = "temperature_2m,relative_humidity_2m,precipitation,weather_code"
            daily = "weather_code,temperature_2m_max,temperature_2m_min,precipitation_sum"
            params = {"latitude": str(latitude), "longitude": str(longitude), "daily": daily}
            params |= {"current": current + ",wind_speed_10m", "timezone": "auto"}
            params["forecast_days"] = str(days)
            api = apis["open-meteo"]
            response, document = await json_object(api, "forecast", params, "current", "daily")
            try:
                lines = _weather_text(label, document)
            except (ValueError, TypeError, AttributeError) as exc:
                raise response.bad(str(exc)) from None
        except ApiError as exc:
            return exc.to_result()
        lines.append(source_line(response, base_of("open-meteo")))
        data = {"place": label, "latitude": latitude, "longitude": longitude}
        return ToolResult.ok("\n".join(lines), data=data | {"current": document["current"]})

    return [weather_forecast]
