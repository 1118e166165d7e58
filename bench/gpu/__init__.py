"""make bench-gpu: one lent card's sitting, decided in advance: what it runs, in what order, and how long it takes.

One module per row kind, each with its runs (and, where it has them, its ratios and notes):
  best.py        degen-train at its best beside a careful compiled hand loop (hand_loop.py) on the same model
  levers.py      each speed lever switched off from the best row alone
  terms.py       each regularizer's step time at the best row beside the FLOPs it adds
  end_to_end.py  the best GPT-2 row over a default cadence, priced for an hour-long run
  host.py        the defaults' host levers: loader workers, the divergence check's read, the checkpoint writer,
                 GPT-2's chunked output layer
  exactness.py   repeats and a resume compared bit for bit, in the default and the deterministic mode
  fsdp.py        FSDP2 on one card against one device
The sitting (sitting.py) runs best, levers, terms and end_to_end unless rows are named; plan.py prints each run's
estimate first and starts none that would end past the budget. runs.py holds what every row is made of.

DEGEN_BENCH_GPU_ON_CPU=1 runs the same plan on the CPU at toy sizes, blocks and head eager (tests/test_gpu_sitting.py):
the code, not numbers.
"""
