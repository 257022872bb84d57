"""pilothouse.providers."""
