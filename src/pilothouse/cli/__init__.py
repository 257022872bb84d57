"""pilothouse.cli."""
