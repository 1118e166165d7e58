"""Each probe's version moves with its code (metrics/probe_versions.py): a change to a probe's code without an entry
in its changelog fails here, so a page can always tell a number measured by an older probe (issue 54.4)."""

from __future__ import annotations

from pathlib import Path

import pytest

from degen_train.metrics.probe_versions import COLUMN_PROBES, PROBES, Probe, code_fingerprint


@pytest.mark.parametrize("name", sorted(PROBES))
def test_a_probes_code_has_not_changed_since_its_version(name: str) -> None:
    probe = PROBES[name]
    now = code_fingerprint(probe.files)
    assert now == probe.fingerprint, (
        f"the {name} probe's code ({', '.join(probe.files)}) changed since version {probe.version}: add a "
        f"(day, what changed) entry to PROBES[{name!r}].changes (or, when no number it measures changes, to its "
        f"same_numbers) and set its fingerprint to {now!r}"
    )


def test_prose_may_change_without_a_version(tmp_path: Path) -> None:
    texts = {"one": "def f(x):\n    'a docstring'\n    # a comment\n    return x + 1\n",
             "two": "def f(x):\n    'another docstring'\n    return x + 1  # another comment\n",
             "three": "def f(x):\n    'a docstring'\n    return x + 2\n"}  # fmt: skip
    for folder, text in texts.items():
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "probe.py").write_text(text)
    one, two, three = (code_fingerprint(("probe.py",), root=tmp_path / folder) for folder in texts)
    assert one == two != three


def test_a_version_is_its_changelogs_length_and_a_day_reads_the_version_then() -> None:
    probe = Probe(("x",), (("2026-11-27", "first fix"), ("2026-11-28", "second fix")), "")
    assert probe.version == 3
    assert [probe.version_on(day) for day in ("2026-11-26", "2026-11-27", "2026-11-28", "2026-12-01")] == [1, 2, 3, 3]
    assert probe.changes_since(2) == ["2026-11-28: second fix"]
    assert set(COLUMN_PROBES.values()) <= set(PROBES)
