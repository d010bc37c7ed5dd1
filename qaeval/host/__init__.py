"""The host side of the boundary: the process custom judges, generators, registered checks and metrics,
and notify hooks run in (``serve``), and the harness's side of it (``clients``, ``custom``, ``hooks``;
``wire`` checks judge requests and replies). In the scoring layer; this ``__init__`` imports nothing."""
