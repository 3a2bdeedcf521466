"""Parse DSL text into a :class:`mapper.frontend.syntax.Program`.

Large explicit-cost graphs take :func:`mapper.frontend.fastparse.fast_parse`, which
builds the program line by line; everything else, and every program with an
error, goes to Lark (:mod:`mapper.frontend.lark_parse`, imported only then).
"""

from __future__ import annotations

from mapper.core.heap import collection_paused
from mapper.frontend import syntax as S
from mapper.frontend.fastparse import fast_parse
from mapper.frontend.syntax import KEYWORDS

__all__ = ["parse", "KEYWORDS"]


def parse(text: str, file: str = "<string>") -> S.Program:
    """Parse ``text`` (the contents of ``file``) into a :class:`~mapper.frontend.syntax.Program`.

    Raises
    ------
    DslError
        On any syntax error, with the span of the offending token.
    """
    with collection_paused():
        fast = fast_parse(text, file)  # large explicit-cost graphs, without a parse tree
        if fast is not None:
            return fast
        from mapper.frontend.lark_parse import parse_with_lark

        return parse_with_lark(text, file)
