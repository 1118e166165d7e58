"""Pretraining objectives; importing this package registers them."""

from degen_train.objectives import coco_clm, electra, mle, mlm, nsp  # noqa: F401
