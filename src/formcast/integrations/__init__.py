"""formcast.integrations."""
