"""The base every layer stands on: typed errors (``errors``), safe file handling (``files``), text
normalisation and search (``text``), the commands' parameters (``params``), the shape every result
shares (``results``), typed DataFrames (``frames``) and the check of a saved record against itself
(``audit``). Nothing here imports another qaeval package."""
