"""The base every layer stands on: typed errors (``errors``), safe file handling (``files``), text
normalisation and search (``text``), the commands' parameters (``params``), the shape every result
shares (``results``) and typed DataFrames (``frames``). Nothing here imports another qaeval package."""
