"""`make reproduce`: the seed methods' claims at CPU scale, as one generated page (docs/reproduce/)."""
