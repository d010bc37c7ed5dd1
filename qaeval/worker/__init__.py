"""The worker side of the boundary: the adapter's worker process, and what every process that runs the
user's code is built from.

=================  ===========================================================================
``serve``          the adapter's worker process (``python -m qaeval.worker.serve FD``, ``--isolation process``)
``process``        a child process that runs user code: what it is given, its lifetime, its exit
``messages``       length-prefixed JSON messages over a socket: bounded reads, parsing, writes
``hardening``      what a child process is denied (ptrace, core dumps) and the harness's guard
``plugins``        resolving ``module:factory`` names; calling user code in-process, contained; progress bars
=================  ===========================================================================

The package sits in the system layer (``tests/test_layers.py``): the worker pool (``qaeval.system``)
starts its workers with it, and the host side (``qaeval.host``, custom judges, generators, checks and
hooks, in the scoring layer) builds its own process from the same ``process``, ``messages`` and
``hardening``. Nothing here imports pandas, and this ``__init__`` imports nothing, so a worker pays only
for the modules it uses.
"""
