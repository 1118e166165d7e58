"""Backbones built from transformers configs, returning ForwardOutput."""
