"""pilothouse.tools."""
