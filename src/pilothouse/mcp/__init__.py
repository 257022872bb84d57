"""pilothouse.mcp."""
