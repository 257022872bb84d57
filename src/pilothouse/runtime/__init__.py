"""pilothouse.runtime."""
