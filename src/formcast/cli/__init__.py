"""formcast.cli."""
