"""The line grammar of plain explicit-cost programs, shared by the fast parser and the direct reader.

Regular expressions for the grammar's names and numbers (grammar/mapper.lark) and for the two
one-line statements with the usual spacing: ``task NAME cost { dev: T [unit], ... }`` and
``a -> b [comm T [unit] | bytes S [unit]]``. :mod:`mapper.frontend.fastparse` builds the syntax
tree from them and :mod:`mapper.frontend.direct` the task graph; both decline on anything else.
"""

from __future__ import annotations

import re

#: A name token.
NAME = r"[A-Za-z_][A-Za-z0-9_]*"
#: A number token (a float or an int).
NUMBER = r"[0-9]+\.[0-9]+(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+|[0-9]+"
#: A task line: its name (group 1) and what is between the cost's braces (group 2).
TASK_LINE = re.compile(rf"[ \t\f]*task[ \t\f]+({NAME})[ \t\f]+cost[ \t\f]*\{{(.*)\}}[ \t\f]*(?:#.*)?")
#: One cost entry: device (group 1), number (group 2) and unit (group 3), up to its comma or the end.
ITEM = re.compile(rf"[ \t\f]*({NAME})[ \t\f]*:[ \t\f]*({NUMBER})(?:[ \t\f]*({NAME}))?[ \t\f]*(?:,|$)")
#: An edge line: source, destination, then optionally ``comm``/``bytes``, the number and a unit.
EDGE_LINE = re.compile(rf"[ \t\f]*({NAME})[ \t\f]*->[ \t\f]*({NAME})"
                       rf"(?:[ \t\f]+({NAME})[ \t\f]+({NUMBER})(?:[ \t\f]*({NAME}))?)?[ \t\f]*(?:#.*)?")
#: Below this many lines Lark is fast enough, and its messages are the same anyway.
MIN_LINES = 200
