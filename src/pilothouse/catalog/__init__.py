"""pilothouse.catalog."""
