"""The http layer (see scheduler/ARCHITECTURE.md)."""
