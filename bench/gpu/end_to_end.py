"""end_to_end: the best GPT-2 row over a default cadence (checkpoint, isotropy probe and validation every 100
updates, final validation): its rate against the best row's steady rate, each periodic event's cost, and what that
cadence, or one on the clock (callbacks.cadence), takes from an hour-long run (metrics.steady.hour_long_rate)."""

from __future__ import annotations

from typing import Any

from bench.gpu.plan import Run
from bench.gpu.runs import ON_CPU, Context, ours
from degen_train.callbacks.cadence import updates_for
from degen_train.metrics.steady import hour_long_rate

ON_THE_CLOCK = {"checkpoint": 30.0, "isotropy": 10.0, "validation": 10.0}  # minutes: callbacks.cadence.*_minutes


def priced(result: dict[str, Any], every: int) -> dict[str, Any]:
    """The run's periodic tallies priced for an hour-long run, on the updates' cadence and on the clock's."""
    if not result.get("tokens_per_s"):
        return result
    step = result["tokens_per_batch"] / result["tokens_per_s"]
    costs = {kind: tally["seconds"] / tally["events"] for kind, tally in result["periodic"].items() if tally["events"]}
    result["costs_per_event_s"], result["cadence_updates"] = costs, every
    result["hour_long"] = hour_long_rate(step, costs, {kind: every for kind in ON_THE_CLOCK})
    clock = {kind: updates_for(minutes, step) for kind, minutes in ON_THE_CLOCK.items()}
    result["hour_long_on_the_clock"] = {**hour_long_rate(step, costs, clock), "minutes": ON_THE_CLOCK}
    return result


def runs(ctx: Context) -> list[Run]:
    long = 300 if not ON_CPU else 12
    every = 100 if not ON_CPU else 4
    overrides = [*ctx.best["gpt2"], f"trainer.max_steps={long}", f"trainer.val_check_interval={every}",
                 "trainer.limit_val_batches=null", f"callbacks.checkpoint.every_n_train_steps={every}",
                 f"callbacks.isotropy.every_n_steps={every}", "final_validation=true"]  # fmt: skip
    return [Run("end_to_end", "gpt2_default_cadence", "gpt2", not ON_CPU, long + 40,  # + the periodic work
                lambda: priced(ours(ctx.scratch / "end_to_end", *overrides), every))]


def compare(rows: dict[str, Any], results: dict[str, Any]) -> None:
    base = results.get("rows", {}).get("best", {}).get("gpt2_ours", {})
    for row in rows.values():
        if row.get("end_to_end_tokens_per_s") and base.get("tokens_per_s"):
            row["vs"] = f"{row['end_to_end_tokens_per_s'] / base['tokens_per_s']:.2f}× the best row's steady rate"


def notes(rows: dict[str, Any]) -> list[str]:
    lines = []
    for row in rows.values():
        if row.get("hour_long"):
            costs = ", ".join(f"{kind} {seconds:.2f} s" for kind, seconds in row["costs_per_event_s"].items())
            rate, every = row["hour_long"]["over_steady"], row["cadence_updates"]
            lines.append(f"Periodic work per event: {costs}. At the defaults' cadence (each every {every} updates) an "
                         f"hour-long run trains at {rate:.3f}× the steady rate.")  # fmt: skip
        if row.get("hour_long_on_the_clock"):
            clock = row["hour_long_on_the_clock"]
            every = ", ".join(f"{kind} every {minutes:g} min" for kind, minutes in clock["minutes"].items())
            lines.append(f"On the clock ({every}: callbacks.cadence), it trains at {clock['over_steady']:.3f}× the "
                         f"steady rate.")  # fmt: skip
    return lines
