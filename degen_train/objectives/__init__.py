"""Pretraining objectives: every module here is imported by degen_train.terms.catalog (a new file registers itself)."""
