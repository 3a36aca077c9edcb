"""The ``seqpack`` command line."""
