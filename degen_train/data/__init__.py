"""Data path: corpus -> tokenizer -> examples (packed blocks or NSP pairs) -> sampler -> collator."""
