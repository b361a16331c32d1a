"""Actions that commit exactly once (filled in below)."""
