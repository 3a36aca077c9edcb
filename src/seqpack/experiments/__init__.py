"""Experiments built on the library: the demo (``seqpack demo``) and its stage cache, the
padded-vs-packed throughput bench (``seqpack bench``), the convergence comparison
(``seqpack compare``) and the report (PNG plots, HTML). Nothing in the library imports them."""
