"""Which version of each probe measured a number: every probe has a changelog, and its version is 1 + the entries in
it. A change to a probe's code must add an entry (tests/unit/test_probe_versions.py holds each probe's code
fingerprint at its version and fails on code that changed without one), so a number stamped with an older version,
or measured on a page written before the entry's day, is known to be an older probe's, and the reproduce summary
marks it instead of judging it (reproduce/claims.py) — no list of superseded numbers is kept by hand.

A probe's files are fingerprinted by their syntax tree without docstrings: comments and prose may change freely; a
code change that leaves every number as it was is entered in ``same_numbers`` instead, with the new fingerprint.
"""

from __future__ import annotations

import ast
import hashlib
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Probe:
    """A probe: the files whose code computes it, its changelog ((day, what changed), oldest first) and the
    fingerprint of its code at the current version."""

    files: tuple[str, ...]
    changes: tuple[tuple[str, str], ...]
    fingerprint: str
    # Changes to its files that leave every number it measures as it was (an input refused earlier, code moved): the
    # fingerprint follows them, the version does not.
    same_numbers: tuple[tuple[str, str], ...] = ()

    @property
    def version(self) -> int:
        return 1 + len(self.changes)

    def version_on(self, day: str) -> int:
        """The version a page written on ``day`` (YYYY-MM-DD) measured with: the changes made by that day."""
        return 1 + sum(changed <= day for changed, _ in self.changes)

    def changes_since(self, version: int) -> list[str]:
        """What changed after ``version``, for the line that says why a number is an older probe's."""
        return [f"{day}: {what}" for day, what in self.changes[version - 1 :]]


PROBES = {
    "w8a8": Probe(
        ("metrics/quantization.py", "metrics/w8a8_probe.py"),
        (("2026-11-27", "the variant's own attention kept (clipped softmax, gates, key/value slot) and the quantizers "
                        "placed as the release places them: norms' γ, embedding sums, residual sums (issue 44)"),
         ("2026-11-28", "BERT's MLP quantized after its GELU (validate_mlm.py 158-160) and a decoder's context "
                        "quantized before its gate (quantized_opt.py 211), as released (issue 54.3)")),
        "0a375caee49edefb",
    ),  # fmt: skip
    "outliers": Probe(
        ("metrics/outliers.py", "metrics/outlier_sites.py"),
        (("2026-11-27", "a decoder's FFN kurtosis and ∞-norm per token row, as validate_clm.py reads them, and the "
                        "sink rate from the variant's own attention maps (issue 44)"),),
        "9ed3850a2644b4bb",
    ),  # fmt: skip
    "sentence_pairs": Probe(
        ("metrics/probes.py",),
        (("2026-11-28", "ℓ_align over STS-B pairs scored above 4, SimCSE's positives (was: 4 or more; issue 54.5)"),),
        "f77e3c6b86b8b670",
        (("2026-11-29", "an STS or WiC file that is a FIFO or a device refused before it is opened (issue 63.2)"),
         ("2026-11-29", "per-pair scores kept; whitening fitted on named splits when asked (eval.sts_whitening_fit), "
          "else on the scored split as before; a headed tab-separated STS file read without quoting (GLUE's STS-B: "
          "a sentence's '\"' merged lines before); the STS-B distribution's sts-dev.csv the pages score reads as "
          "before (issue 64.4)"),
         ("2026-12-02", "each kept per-pair and per-item score carries its item's id (row and a hash of its text), so "
          "two runs are paired on equal items only (issue 71.3)"),
         ("2026-12-02", "a JSON-lines STS file's line that is not one JSON object is refused naming its line (issue "
          "72.3); every file that read before reads the same"),
         ("2026-12-02", "transformed(), which nothing called, removed (issue 70.8)")),
    ),  # fmt: skip
}
# The columns of a reproduce page each probe measures.
COLUMN_PROBES = {
    "W8A8 gap": "w8a8",
    "max kurtosis": "outliers",
    "max ‖x‖∞": "outliers",
    "attention sink %": "outliers",
    "ℓ_align [CLS]": "sentence_pairs",
}


def code_fingerprint(files: tuple[str, ...], root: Path = PACKAGE) -> str:
    """A short sha256 of the files' syntax trees (under ``root``) with their docstrings removed (comments never
    reach the tree)."""
    digest = hashlib.sha256()
    for name in files:
        tree = ast.parse((root / name).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            body = getattr(node, "body", None)
            if isinstance(body, list) and body and _is_docstring(body[0]):
                node.body = body[1:] or [ast.Pass()]
        digest.update(name.encode() + b"\0" + ast.dump(tree).encode() + b"\0")
    return digest.hexdigest()[:16]


def _is_docstring(statement: ast.stmt) -> bool:
    return isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant) and isinstance(
        statement.value.value, str)  # fmt: skip


def current_versions() -> dict[str, int]:
    """{probe: its version now}: what a measurement written today is stamped with."""
    return {name: probe.version for name, probe in PROBES.items()}
