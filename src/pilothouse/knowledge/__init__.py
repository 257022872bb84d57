"""pilothouse.knowledge."""
