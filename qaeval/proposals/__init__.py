"""Proposed cases: the golden set grows from traffic and from documents, and people decide what enters it.

``qaeval propose`` writes a review sheet of candidates (``candidates``) from a monitor record
(``traffic``, reading it with ``scan`` and ``pool``) or a corpus (``documents``, checked by ``verify``);
``qaeval accept`` turns the rows a person marked ``y`` into living-split cases (``accept``) and keeps
every decision (``ledger``). Nothing enters the golden set without that mark (docs/guides/grow.md).
"""
