"""pytest plugin (placeholder until the golden-case collector lands)."""
