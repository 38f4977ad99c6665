"""Context Engine: a transparent OpenAI-compatible proxy that rewrites agent context."""

__version__ = "0.1.0"
