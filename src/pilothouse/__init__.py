"""pilothouse: governed access from business applications to large language models."""

__version__ = "0.1.0"
