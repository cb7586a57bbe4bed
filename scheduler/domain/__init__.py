"""The domain layer (see scheduler/ARCHITECTURE.md)."""
