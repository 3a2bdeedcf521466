"""The exact mapping engine, used by the ``milp`` mapper (:mod:`mapper.mapping.milp`)
and by large-neighbourhood search (:mod:`mapper.mapping.lns`).

- :mod:`.subproblem`: what is asked (:class:`~.subproblem.Subproblem`) and answered (:class:`~.subproblem.Solved`);
- :mod:`.formulation`: the communication-aware MILP of a subproblem;
- :mod:`.solver`: the solver glue (HiGHS, else CBC, through PuLP), the one PuLP import;
- :mod:`.solve`: formulation + solver = :func:`~.solve.solve`;
- :mod:`.incumbent`: heuristic warm starts and re-timing;
- :mod:`.result`: lower bounds, gaps and progress reports.
"""
