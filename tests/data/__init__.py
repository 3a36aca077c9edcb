"""The task facts that tests writing rows with `seqpack.data.write_packed` pass in its ``extra``
(`seqpack.data.format.DatasetFacts`): a causal LM's rows, and rows with no labels column."""

CLM_FACTS = {"token_labels": True, "float_labels": False, "causal_lm": True}
NO_LABELS = {"token_labels": False, "float_labels": False, "causal_lm": False}
