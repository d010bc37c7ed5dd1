"""Everything that runs the user's code, and the wire between qaeval and it.

=================  ===========================================================================
``plugins``        resolving ``module:factory`` names; calling user code in-process, contained
``messages``       length-prefixed JSON messages over a socket: bounded reads, parsing, writes
``process``        a child process that speaks them: what it is given, its lifetime, its exit
``hardening``      what a child process is denied (ptrace, core dumps) and the harness's guard
``worker``         the adapter's worker process (``--isolation process``)
``host``           the process custom judges, generators, checks and hooks run in
``clients``        the harness's side of that host: ``JudgeProcess``, ``GeneratorProcess``
``custom``         registered checks and metrics, run in the host
``hooks``          notify hooks (drift and monitor alarms), run in the host
``wire``           judge requests and replies as plain JSON, checked when read
=================  ===========================================================================

The modules sit at the layer of what they carry (``tests/test_layers.py``): the process plumbing in the
base, the adapter's worker with the system, the judge's host with scoring. This ``__init__`` imports
nothing, so importing one of them costs only that one.
"""
