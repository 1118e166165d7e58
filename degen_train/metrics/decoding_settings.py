"""The decodings' names and settings (metrics/decoding.py decodes with them), apart from torch: degen-eval reads its
command line's defaults and choices here before it loads anything heavy."""

from __future__ import annotations

from dataclasses import dataclass

DECODINGS = ("greedy", "beam", "top_k", "nucleus", "contrastive")
END_OF_TEXT = ("cut", "banned")  # cut: SimCTG's release (no minimum, cut at the first end-of-text); banned: none


@dataclass(frozen=True)
class DecodingSettings:
    """Each decoding's settings. Defaults: contrastive search k = 8, α = 0.6 (SimCTG's released WikiText-103
    example), nucleus p = 0.95 (Holtzman et al. 2020; SimCTG's baseline), top-k k = 40 (GPT-2's samples, Radford et
    al. 2019), beam width 4."""

    beam_width: int = 4
    top_k: int = 40
    top_p: float = 0.95
    contrastive_k: int = 8
    contrastive_alpha: float = 0.6
    seed: int = 0  # the sampling decodings draw from torch's generator seeded with it
    end_of_text: str = "cut"  # END_OF_TEXT: SimCTG's release (cut), or every continuation at full length (banned)

    def check(self) -> None:
        if self.end_of_text not in END_OF_TEXT:
            raise ValueError(f"end_of_text={self.end_of_text!r} is not one of {', '.join(END_OF_TEXT)}")
        for name in ("beam_width", "top_k", "contrastive_k"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be at least 1")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p={self.top_p} must be in (0, 1]")
        if not 0.0 <= self.contrastive_alpha <= 1.0:
            raise ValueError(f"contrastive_alpha={self.contrastive_alpha} must be in [0, 1]")
