"""Importers: task graphs from other tools' formats, and a DSL writer.

- :mod:`mapper.frontend.importers.wfcommons`: WfCommons WfFormat instances (schema
  1.4, 1.5, 1.6) to a :class:`~mapper.core.graph.TaskGraph` of kernel-less tasks.
- :mod:`mapper.frontend.importers.dsl_writer`: a :class:`~mapper.core.graph.TaskGraph` of
  ``task`` statements back to DSL text that lowers to the same graph.
- :mod:`mapper.frontend.importers.related`: a related-machines instance (node
  speeds, link strengths, task costs, data sizes; the model of SAGA and of
  the HEFT paper) as an explicit-cost graph and a platform.
"""

from mapper.frontend.importers.dsl_writer import graph_to_dsl
from mapper.frontend.importers.related import RelatedNetwork, related_instance
from mapper.frontend.importers.wfcommons import ReferenceMachine, import_wfcommons, read_wfformat

__all__ = [
    "graph_to_dsl", "RelatedNetwork", "related_instance",
    "ReferenceMachine", "import_wfcommons", "read_wfformat",
]
