"""Backbones built from transformers configs, returning ForwardOutput."""

# Importing any model module teaches transformers' Auto classes the degen_<arch> types that exports with an
# attention variant declare, so every degen_train loader reads them (attention_variants.register_exported_classes).
from degen_train.models import attention_variants as _attention_variants  # noqa: F401, E402
