"""The decodings' names and settings (metrics/decoding.py decodes with them), apart from torch: degen-eval reads its
command line's defaults and choices here before it loads anything heavy."""

from __future__ import annotations

from typing import Annotated, get_args

from pydantic import ConfigDict, Field
from pydantic.dataclasses import dataclass

from degen_train.evaluation.section import Decoding, EndOfText

DECODINGS, END_OF_TEXT = get_args(Decoding), get_args(EndOfText)  # declared with the eval section's fields
Count = Annotated[int, Field(ge=1)]


@dataclass(frozen=True, config=ConfigDict(extra="forbid", allow_inf_nan=False))
class DecodingSettings:
    """Each decoding's settings, their ranges checked as they are made. Defaults: contrastive search k = 8, α = 0.6
    (SimCTG's released WikiText-103 example), nucleus p = 0.95 (Holtzman et al. 2020; SimCTG's baseline), top-k
    k = 40 (GPT-2's samples, Radford et al. 2019), beam width 4."""

    beam_width: Count = 4
    top_k: Count = 40
    top_p: Annotated[float, Field(gt=0, le=1)] = 0.95
    contrastive_k: Count = 8
    contrastive_alpha: Annotated[float, Field(ge=0, le=1)] = 0.6
    seed: int = 0  # the sampling decodings draw from torch's generator seeded with it
    end_of_text: EndOfText = "cut"  # SimCTG's release (cut), or every continuation at full length (banned)
