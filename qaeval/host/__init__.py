"""The host side of the boundary: the process custom judges, generators, registered checks and metrics,
and notify hooks run in, and the harness's side of it.

=================  ===========================================================================
``serve``          the host process (``python -m qaeval.host.serve FD``): builds the user's object, answers
``clients``        the harness's side of it: ``JudgeProcess``, ``GeneratorProcess``, how a host is launched
``custom``         registered checks and metrics: ``CustomProcess``, and what the host does with them
``hooks``          notify hooks (drift and monitor alarms): ``HookProcess``
``wire``           judge requests and replies as plain JSON, checked when read
=================  ===========================================================================

The package sits in the scoring layer (``tests/test_layers.py``): what crosses is a judge's requests and
a check's samples. The process plumbing it shares with the adapter's worker is the worker side's
(``qaeval.worker``). This ``__init__`` imports nothing.
"""
