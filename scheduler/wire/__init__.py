"""The wire layer (see scheduler/ARCHITECTURE.md)."""
