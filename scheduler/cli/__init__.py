"""The cli layer (see scheduler/ARCHITECTURE.md)."""
