"""Renderers: turn views, findings and comparisons into text, JSON, CSV or Markdown."""
