"""pilothouse.server."""
