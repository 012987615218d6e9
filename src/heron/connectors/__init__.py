"""Connectors: documents, OCR, public data, spreadsheets, calendars, GitHub, webhooks."""
