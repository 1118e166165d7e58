"""Helpers every layer uses: atomic writes, the config folder's place, seeded draws, silenced noise."""
