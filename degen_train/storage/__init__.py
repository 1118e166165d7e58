"""What a run writes and reads back safely: checkpoints and sharded checkpoints, the one-writer lock and the run
folder checks, the user's own-runs registry."""
