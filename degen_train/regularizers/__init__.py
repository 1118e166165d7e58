"""Anti-degeneration regularizers; importing this package registers them.

Add one: a file here with a ``@register_term("name")`` LossTerm, a yaml in conf/regularizer/,
and a test with a hand-computed case.
"""

from degen_train.regularizers import coco_scl, cosreg, tacl  # noqa: F401
