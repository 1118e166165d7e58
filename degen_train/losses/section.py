"""objective.NAME.* / regularizer.NAME.*: the typed section a loss term's options sit in. The options themselves are
each term's own: its constructor's keywords, read from its file by losses/declarations.py with their annotations
(types, ranges and roles), so this section lists none of them."""

from __future__ import annotations

from degen_train.core.roles import TRAINS, Declared
from degen_train.core.section import Open, Section


class TermSection(Section):
    """objective.NAME / regularizer.NAME: a loss term's options, checked by the term's own declaration
    (losses/declarations.py), and each with the role its annotation there declares: what the run trains, unless it
    says otherwise (TaCL's ``teacher: Annotated[str | None, INPUT]``, a model it loads)."""

    model_config = Open

    @classmethod
    def other_key_role(cls, option: str) -> Declared:
        """The role of ``option``: the one a term's own file declares for it; under a section's name that is not the
        term's (``term:`` inside names it) the role any term declares for that option, the run's own otherwise."""
        from degen_train.losses.declarations import declared_terms

        declared = (term.role(option) for term in declared_terms().values())
        return next((role for role in declared if role is not None), TRAINS)
