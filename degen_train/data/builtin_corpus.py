"""The embedded default corpus: the help topics that ship with CPython (``pydoc_data``).

Real English prose (about 0.47 MB in 79 topics), present on every Python install, so the default
run needs no download and no data from the user.
"""

from __future__ import annotations

import re


def builtin_documents() -> list[str]:
    """One document per help topic, paragraphs joined by newlines, reST markup lines dropped."""
    from pydoc_data.topics import topics

    documents = []
    for name in sorted(topics):
        paragraphs = []
        for block in re.split(r"\n\s*\n", topics[name]):
            lines = [line.strip() for line in block.splitlines()]
            # Underlines (*****, =====) and grammar/code lines are not prose.
            lines = [line for line in lines if line and not re.fullmatch(r"[*=\-~^]{3,}", line)]
            text = " ".join(lines)
            if len(text.split()) >= 4:
                paragraphs.append(text)
        if paragraphs:
            documents.append("\n".join(paragraphs))
    return documents
