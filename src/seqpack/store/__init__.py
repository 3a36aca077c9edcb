"""Token store: flat ``tokens.bin`` + ``offsets.idx`` + ``meta.json``, memory-mapped; or many in shards.

>>> import tempfile, numpy as np
>>> d = tempfile.mkdtemp()
>>> with StoreWriter(d + "/s", vocab_size=300, tokenizer_hash="x") as w:
...     w.add(np.array([5, 6, 7])); w.add(np.array([], dtype=np.uint32)); w.add(np.array([8]))
>>> s = TokenStore(d + "/s")
>>> len(s), s[0].tolist(), s.lengths().tolist(), s.meta["empty_documents"]
(2, [5, 6, 7], [3, 1], 1)
"""

from __future__ import annotations

from seqpack.store.build import build_store
from seqpack.store.sharded import ShardedTokenStore, open_store
from seqpack.store.store import FORMAT_VERSION, StoreWriter, TokenStore, token_dtype

__all__ = [
    "FORMAT_VERSION",
    "ShardedTokenStore",
    "StoreWriter",
    "TokenStore",
    "build_store",
    "open_store",
    "token_dtype",
]
