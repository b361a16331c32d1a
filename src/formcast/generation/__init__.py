"""formcast.generation."""
