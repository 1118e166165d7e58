"""Pretraining objectives: every module here is imported by degen_train.catalog (a new file registers itself)."""
