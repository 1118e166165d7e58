"""degen-train --list: each recipe's first sentence whole (issue 24.8: descriptions were cut mid-sentence)."""

from __future__ import annotations

from pathlib import Path

from degen_train.cli.listing import first_sentence, listing
from degen_train.core.package_dir import config_dir


def test_the_first_sentence_runs_over_lines_and_stops_at_its_end(tmp_path: Path) -> None:
    recipe = tmp_path / "r.yaml"
    header = ["# @package _global_", "# TaCL (Su et al. 2021) pretraining, e.g. from a", "# teacher run. Two."]
    recipe.write_text("\n".join(header) + "\n")
    assert first_sentence(recipe) == "TaCL (Su et al. 2021) pretraining, e.g. from a teacher run."
    recipe.write_text("# Every method as one sweep:\n#   degen-train -m recipe=x\nseed: 0\n")
    assert first_sentence(recipe) == "Every method as one sweep."


def test_every_recipe_description_in_the_listing_is_a_whole_sentence() -> None:
    text = listing()
    recipes = text[: text.index("model presets")].splitlines()[1:]
    described: dict[str, str] = {}
    name = ""
    for line in recipes:
        if line[2] != " ":
            name = line.split()[0]
            described[name] = line[21:]
        else:
            described[name] += " " + line.strip()
    assert set(described) == {p.stem for p in (config_dir() / "recipe").glob("*.yaml")}
    for name, description in described.items():
        assert description.rstrip().endswith((".", ".)")), (name, description)
    assert max(len(line) for line in text.splitlines()) <= 124


def test_each_term_switch_shows_what_its_annotation_allows() -> None:
    # The same annotations that check the options (term_options.py) say them in --list.
    text = " ".join(listing().split())
    assert "rows='all' (all|seen)" in text
    assert "alpha=0.03 (in (0, 1))" in text
    assert "per_targets=32768 (>= 1 or null)" in text
    assert "chunk_size=1024" in text  # mle's yaml default (its class says None; mlm's yaml keeps None)
    # ELECTRA's: the value its yaml sets (conf/objective/electra.yaml), the choices from its base class's annotation
    assert "generator_sample_mode='train' (train|eval|null)" in text
