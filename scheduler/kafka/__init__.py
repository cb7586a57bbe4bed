"""The kafka layer (see scheduler/ARCHITECTURE.md)."""
