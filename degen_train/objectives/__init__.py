"""Pretraining objectives; importing this package registers them."""

from degen_train.objectives import mle, mlm, nsp  # noqa: F401
