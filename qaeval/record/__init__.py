"""The run record: one JSON file a run, gate, calibration, drift or monitor result is saved as.

==========  ==================================================================================
``write``   saving a result and loading it back (``load_run``), baselines read for the gate
``shape``   the record's fields and their types, checked field by field when read
``check``   the record checked against itself: its verdicts recomputed from its own frames
``runs``    the table of many records (``qaeval runs``)
==========  ==================================================================================

What a recomputation found is listed by ``qaeval.core.audit``, which the verdicts that record one share.
This ``__init__`` imports nothing.
"""
