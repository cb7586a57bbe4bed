"""The launcher layer (see scheduler/ARCHITECTURE.md)."""
