"""The worker layer (see scheduler/ARCHITECTURE.md)."""
