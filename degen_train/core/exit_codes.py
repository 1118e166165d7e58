"""The exit codes the commands promise (docs/faults.md), in a module that imports nothing: a command that refuses
its input before the frameworks load says them too."""

PREEMPTED_EXIT = 75  # sysexits' EX_TEMPFAIL: a temporary failure, the caller is invited to retry (resume)
