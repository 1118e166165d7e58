"""Backbones built from transformers configs, returning ForwardOutput; the model's typed section (section.py).

This file imports nothing, so the typed section loads without torch. The degen_<arch> types that exports with an
attention variant declare are taught to transformers' Auto classes by importing attention_variants, which
loading.py and architectures.py do, and so every degen_train loader (attention_variants.register_exported_classes).
"""
