"""Where a run computes: collectives, reading FSDP2's shards, threads, precision checks, the matmul peak, host
reads of device values."""
