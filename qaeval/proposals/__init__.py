"""Proposed cases: the golden set grows from traffic and from documents, and people decide what enters it.

``qaeval propose`` writes a review sheet of candidate cases; ``qaeval accept`` turns the rows a person
marked ``y`` into living-split cases. Nothing enters the golden set without that mark.

=================  ======================================================================================
``candidates``     the candidate, the review sheet (CSV, safe to open in a spreadsheet) and reading it back
``traffic``        candidates from a monitor record: the logged rows most worth a look, sampled across
                   slices and windows, read back from the log and checked again
``documents``      candidates from a corpus: generated, then verified mechanically before anyone sees them
``verify``         the mechanical rules a generated candidate must pass (pure functions)
``accept``         the filled sheet into cases, validated against the whole suite; the ledger of decisions
=================  ======================================================================================

The generator (its prompt, its protocol, the HTTP generator) is run as a judge is, and sits with the judges
(``qaeval.judges.generator``).
"""
