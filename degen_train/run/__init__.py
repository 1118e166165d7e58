"""A run's life cycle: pretrain.train builds the pieces (build), applies compile and FSDP2 (parallel), trains the
LightningModule (module, step_log), resumes or branches, exports, and prints its table; sweeps of runs; the
fake-device step check."""
