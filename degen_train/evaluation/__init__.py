"""degen-analyze and degen-eval: the instruments run on a model folder."""
