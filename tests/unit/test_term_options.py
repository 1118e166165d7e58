"""Every loss term's options are checked against its constructor's annotations (degen_train/terms/options.py)."""

from __future__ import annotations

import inspect
import typing

import pytest

from degen_train.losses.catalog import build_terms, discover_terms
from degen_train.losses.contract import LossTerm
from degen_train.losses.options import _without_none, option_hints


def _initializers(term: type[LossTerm]) -> list[tuple[type, object]]:
    """(class, __init__) of each class a term is built through, LossTerm's own base excluded."""
    return [
        (klass, klass.__dict__["__init__"])
        for klass in term.__mro__
        if issubclass(klass, LossTerm) and klass is not LossTerm and "__init__" in klass.__dict__
    ]


def _choices() -> list[tuple[str, str, tuple]]:
    """(term, option, choices) for every option of every registered term that is one of a fixed set."""
    cases = []
    for name, term in sorted(discover_terms().items()):
        for _, init in _initializers(term):
            for option, hint in option_hints(getattr(init, "__wrapped__", init)).items():
                _, inner = _without_none(hint)
                if typing.get_origin(inner) is typing.Literal:
                    cases.append((name, option, typing.get_args(inner)))
    return sorted(set(cases))


def test_every_option_of_every_term_has_an_annotation_that_resolves() -> None:
    # An annotation that cannot be resolved is left unchecked: none may be, or a bad value would pass silently.
    for name, term in discover_terms().items():
        for klass, init in _initializers(term):
            raw = getattr(init, "__wrapped__", init)
            keyword = {p for p, v in inspect.signature(raw).parameters.items() if v.kind is v.KEYWORD_ONLY}
            unresolved = keyword - set(option_hints(raw))
            assert not unresolved, f"{name} ({klass.__name__}): unresolved {unresolved}"
            assert getattr(init, "__wrapped__", None) is not None, f"{klass.__name__}.__init__ is not checked"


def test_the_sets_of_choices_were_found() -> None:
    # The transcription of the hand checks these annotations replaced: at least these are fixed sets.
    found = {(term, option) for term, option, _ in _choices()}
    assert {("cosreg", "rows"), ("tacl", "teacher_sharding"), ("istar", "prior"), ("simcse", "pooler"),
            ("electra", "detection_head"), ("coco_clm", "lm_form"), ("coco_scl", "projection"),
            ("spectrum_control", "profile"), ("unlikelihood", "candidates"), ("simctg", "mask_from"),
            ("electra", "generator_sample_mode")} <= found  # fmt: skip


@pytest.mark.parametrize(("term", "option", "choices"), _choices(), ids=lambda value: str(value))
def test_a_value_outside_the_choices_is_refused_under_the_configs_key(term: str, option: str, choices: tuple) -> None:
    # Configured under another key (term: NAME), the message names the key the config has.
    listed = ", ".join(map(str, choices))
    with pytest.raises(ValueError, match=rf"^regularizer\.mine\.{option}='bogus' is not one of {listed}"):
        build_terms({"regularizer": {"mine": {"term": term, option: "bogus"}}})


@pytest.mark.parametrize(
    ("section", "options", "message"),
    [
        ("objective", {"agg": {"alpha": 1.5}}, r"^objective\.agg\.alpha must be in \(0, 1\), got 1\.5$"),
        ("objective", {"agg": {"per_targets": 0}}, r"^objective\.agg\.per_targets must be >= 1 or null, got 0$"),
        ("objective", {"mle": {"chunk_size": 0}}, r"^objective\.mle\.chunk_size must be >= 1 or null, got 0$"),
        ("objective", {"electra": {"generator_weight": -1}}, r"^objective\.electra\.generator_weight must be >= 0"),
        ("objective", {"coco_clm": {"sampling_temperature": 0}}, r"sampling_temperature must be > 0, got 0$"),
        ("regularizer", {"coco_scl": {"crop_fraction": 0}}, r"coco_scl\.crop_fraction must be in \(0, 1\]"),
        ("regularizer", {"istar": {"refresh_points": 1}}, r"^regularizer\.istar\.refresh_points must be >= 2, got 1$"),
        ("regularizer", {"tacl": {"temperature": 0}}, r"^regularizer\.tacl\.temperature must be > 0, got 0$"),
        # strict: a string is no bool and no number, though it would be truthy in the code that reads it
        ("regularizer", {"simcse": {"gather_negatives": "false"}}, r"^regularizer\.simcse\.gather_negatives='false': "),
        ("regularizer", {"simctg": {"margin": "0.5"}}, r"^regularizer\.simctg\.margin='0\.5': "),
        ("objective", {"mlm": {"chunk_size": 2.5}}, r"^objective\.mlm\.chunk_size=2\.5: "),
    ],
)
def test_a_value_outside_its_range_or_type_is_refused_by_name(section: str, options: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build_terms({section: options})


def test_good_values_pass_unchanged_and_a_term_built_in_python_is_checked_too() -> None:
    terms, _ = build_terms({"objective": {"agg": {"alpha": 0.1, "per_targets": None, "window_steps": 3}}})
    assert (terms["agg"].alpha, terms["agg"].per_targets, terms["agg"].window_steps) == (0.1, None, 3)
    agg = discover_terms()["agg"]
    with pytest.raises(ValueError, match=r"^objective\.agg\.window_steps must be >= 1, got 0$"):
        agg(window_steps=0)
