"""pilothouse.memory."""
