"""The host audit: one collector per source of facts, and parsers for the tools' output."""
