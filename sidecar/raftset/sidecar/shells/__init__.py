"""shells."""
