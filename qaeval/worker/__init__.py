"""The worker side of the boundary: the adapter's worker process (``serve``) and what every process
that runs user code is built from (``process``, ``messages``, ``hardening``, ``plugins``). In the system
layer; nothing here imports pandas, and this ``__init__`` imports nothing."""
