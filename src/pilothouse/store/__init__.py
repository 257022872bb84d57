"""pilothouse.store."""
