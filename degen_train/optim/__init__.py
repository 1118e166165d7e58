"""The optimizer and the schedule, each with its typed config section beside it:

    section.py     OptimizerConfig, SchedulerConfig (optimizer.*, scheduler.*; conf/optimizer/, conf/scheduler/)
    optimizer.py   build_optimizer: AdamW without decay on biases and LayerNorm (conf/optimizer/adamw.yaml)
    schedule.py    build_scheduler: warm-up + linear, cosine, constant or WSD decay (conf/scheduler/)
    muon.py        Muon for the hidden matrices, AdamW for the rest (conf/optimizer/muon.yaml)
    clipping.py    gradient clipping that reuses the divergence guard's norm, and clips fused optimizers
"""
