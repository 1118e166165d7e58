"""degen_train: pretraining with anti-degeneration losses, and instruments for the degeneration."""

__version__ = "0.1.0"
