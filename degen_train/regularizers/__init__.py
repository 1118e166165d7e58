"""Anti-degeneration regularizers: every module here is imported by degen_train.terms.catalog.

Add one: a file here with a ``@register_term("name")`` LossTerm, a yaml in conf/regularizer/,
and a test with a hand-computed case. Nothing else is edited.
"""
