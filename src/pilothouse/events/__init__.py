"""pilothouse.events."""
