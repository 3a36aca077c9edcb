"""The stages of a sharded pack job (`seqpack.pipeline.job`), as top-level functions of small,
picklable arguments, so that any engine runs them and they write the same bytes.

1. `sequences_stage` (one per input shard): the task builds the shard's sequences, saved as
   ``.npy`` files in the job's work directory (memory: one shard).
2. `route_stage` (one per input shard, once the plan is made): the shard's saved tokens
   read in one pass and written again in plan order: grouped by the output row group their
   sequence lands in, in slot order within each group.
3. `packs_stage` (one per output shard): each row group's tokens read as one contiguous
   range of every routed file (sequential reads, never a page at random: a job whose work files
   do not fit in memory does not re-read evicted pages), laid into rows
   (`seqpack.data.columns.materialize`) and written to one Parquet part.

Each stage records itself when its outputs are complete (`seqpack._stages.StageLog`), so a
re-run of the same job reuses it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from seqpack import _native
from seqpack._atomic import atomic_directory, atomic_file
from seqpack._stages import STAGE, StageLog, content_hash, file_fingerprint, file_sha256
from seqpack.data.columns import materialize, segment_dtype
from seqpack.data.example_table import check_table, rebase, write_part
from seqpack.data.format import write_parquet_groups
from seqpack.data.sequences import Sequences, offsets_of
from seqpack.errors import UserError
from seqpack.packing import Packing
from seqpack.store import TokenStore
from seqpack.tasks import get_task
from seqpack.tasks.base import split_derived

#: a sequences stage's example table (`seqpack.data.example_table`), when its task keeps one
EXAMPLES_FILE = "examples.parquet"

if TYPE_CHECKING:
    from seqpack.pipeline.config import PackConfig
    from seqpack.tasks.spec import PackTokenizer


def sequences_stage(
    shard: str | list[dict[str, Any]],
    tokenizer: PackTokenizer,
    config: PackConfig,
    doc_base: int,
    path: str,
    context: dict[str, Any] | None = None,
    key: str = "",
    done: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Build one input shard's sequences (a token store shard's path, or a batch of example
    records) and save them under ``path``, recorded under ``key`` (`sequences_key`); returns
    their summary. ``done``: the summary the driver found recorded and verified (reused as is)."""
    if done is not None:
        return done
    out = Path(path)
    log = StageLog(out.parent)
    packing = get_task(config.task).packs()
    if isinstance(shard, str):  # the derived fields (made again after the gather) not even made
        seqs, derived = packing.stored_sequences(TokenStore(shard), tokenizer, config)
    else:
        try:
            seqs, derived = split_derived(
                packing.build_shard(shard, tokenizer, config, context or {}), packing.derived_fields
            )
        except ValueError as e:  # "example i" counts within the shard: say which records it holds
            raise UserError(f"examples {doc_base}..{doc_base + len(shard) - 1} of the file: {e}") from e
    with atomic_directory(out, kind=STAGE, overwrite=True) as tmp:
        np.save(tmp / "offsets.npy", seqs.offsets)
        np.save(tmp / "example_ids.npy", seqs.example_ids + doc_base)
        for name, v in seqs.token_fields.items():
            if not (isinstance(shard, str) and packing.tokens_from_store):  # else the route stage makes them again
                np.save(tmp / f"token.{name}.npy", v)
        for name, v in seqs.seq_fields.items():
            np.save(tmp / f"seq.{name}.npy", v)
        if seqs.examples is not None:  # the shard's example table, its ids the dataset's
            check_table(seqs.examples, f"task {config.task}")
            write_part(rebase(seqs.examples, doc_base), tmp / EXAMPLES_FILE)
    summary = {
        "num_sequences": seqs.num_sequences,
        "num_examples": seqs.num_examples,
        "dropped": seqs.dropped,
        "info": seqs.info,
        "position_fields": list(seqs.position_fields),
        "token_fields": {
            **{k: v.dtype.str for k, v in seqs.token_fields.items()},
            **{k: np.dtype(d).str for k, d in derived.items()},
        },
        "derived_fields": list(derived),
        "seq_fields": {k: v.dtype.str for k, v in seqs.seq_fields.items()},
        "examples": seqs.examples is not None,
    }
    summary = json.loads(json.dumps(summary))  # as a reused record reads back (key order kept: it orders the columns)
    log.finish(out.name, key, summary, files=[out])
    return summary


def input_identity(shard: str | list[dict[str, Any]]) -> Any:
    """What an input shard's sequences depend on: a store shard's content (its ``meta.json``, which
    holds the checksums of its token files, after the files are read against them:
    `TokenStore.verify` raises if they changed since tokenize), or a hash of the example
    records. A store written before checksums is known by its files' size and mtime."""
    if isinstance(shard, str):
        d = Path(shard)
        if TokenStore(d).verify():
            return {"meta": file_sha256(d / "meta.json")}
        return {
            "files": {f: file_fingerprint(d / f) for f in ("tokens.bin", "offsets.idx", "meta.json")},
            "meta": file_sha256(d / "meta.json"),
        }
    return content_hash(*shard)


#: what a sequences stage saves (2: a task's derived fields are not saved; 3: nor the token fields of
#: a task whose route stage makes them from the store); part of its key, so that a work directory left
#: by another version is not reused
SEQUENCES_FORMAT = 3


def sequences_key(name: str, doc_base: int, identity: Any, config: PackConfig, tokenizer: PackTokenizer) -> str:
    """The key a sequences stage is recorded under: its inputs' identity and everything that changes its bytes."""
    return content_hash(SEQUENCES_FORMAT, name, doc_base, identity, config.to_dict(), tokenizer.fingerprint())


def route_stage(
    src: str,
    path: str,
    slots: np.ndarray,
    group_bounds: np.ndarray,
    fields: list[str],
    key: str,
    done: dict[str, Any] | None = None,
    rebuild: tuple[str, PackTokenizer, PackConfig] | None = None,
) -> dict[str, Any]:
    """Write input shard ``src``'s saved token ``fields`` again under ``path``, as raw ``.bin``
    files in plan order: its sequences sorted by row group (``group_bounds``: the first slot of
    each, and the slot count), then by slot (``slots``: the plan position of each of its
    sequences). Memory: one shard. Recorded under ``key`` (`route_key`). ``rebuild``:
    ``(store shard, tokenizer, config)`` of a task whose token fields were not saved
    (``Packing.tokens_from_store``): they are made again from the store shard.

        >>> # sequences 0, 1, 2 of a shard sit at slots 5, 0, 3; groups hold slots 0-1, 2-3, 4-5:
        >>> np.lexsort((np.array([5, 0, 3]), np.array([2, 0, 1]))).tolist()  # routed order
        [1, 2, 0]
    """
    if done is not None:
        return done
    out, d = Path(path), Path(src)
    group = np.searchsorted(group_bounds, slots, side="right") - 1
    order = np.lexsort((slots, group)).astype(np.int64)
    off = np.load(d / "offsets.npy").astype(np.int64, copy=False)
    made: dict[str, np.ndarray] = {}
    if rebuild is not None:
        shard, tokenizer, config = rebuild
        seqs, _ = get_task(config.task).packs().stored_sequences(TokenStore(shard), tokenizer, config)
        if not np.array_equal(seqs.offsets, off):
            raise OSError(f"{shard}: the store shard changed while it was being packed; run the job again")
        made = seqs.token_fields
    with atomic_directory(out, kind=STAGE, overwrite=True) as tmp:
        for k in fields:
            with open(tmp / f"token.{k}.bin", "wb") as f:
                write_in_order(f, made[k] if rebuild is not None else map_npy(d / f"token.{k}.npy"), off, order)
    StageLog(out.parent).finish(out.name, key, {}, files=[out])
    return {}


#: tokens a route stage gathers into its buffer before writing them (the buffer is reused: fresh
#: memory costs this VM a page fault per 4 KB, and the whole shard's tokens gathered at once did)
ROUTE_CHUNK = 1 << 21


def write_in_order(
    f: Any, tokens: np.ndarray, offsets: np.ndarray, order: np.ndarray, *, chunk: int = ROUTE_CHUNK
) -> None:
    """Write the sequences ``tokens[offsets[i]:offsets[i + 1]]`` for ``i`` in ``order`` to the file
    ``f``, one after another, gathered ``chunk`` tokens at a time (a longer sequence alone).

        >>> import io
        >>> f = io.BytesIO()
        >>> write_in_order(f, np.array([1, 2, 3, 4, 5], np.uint8), np.array([0, 2, 3, 5]), np.array([2, 0, 1]), chunk=3)
        >>> list(f.getvalue())
        [4, 5, 1, 2, 3]
    """
    ends = np.cumsum(np.diff(offsets)[order])  # tokens written once each sequence is
    buf = np.empty(min(chunk, int(ends[-1]) if ends.size else 0), dtype=tokens.dtype)
    pad = np.zeros((), dtype=tokens.dtype)
    lo, done = 0, 0
    while lo < order.size:
        hi = max(lo + 1, int(np.searchsorted(ends, done + chunk, side="right")))
        n = int(ends[hi - 1]) - done
        dst = buf[:n] if n <= buf.size else np.empty(n, dtype=tokens.dtype)
        _native.scatter_rows(
            tokens, offsets, order[lo:hi], np.array([0, hi - lo], dtype=np.int64), dst.reshape(1, n), pad, 1
        )
        f.write(dst.data)
        lo, done = hi, done + n


def map_npy(path: Path) -> np.ndarray:
    """A saved 1-D array mapped read-only, not copied; the file is read ahead whole (one sequential
    read: a gather reads it in plan order, a page here and there, which from a file evicted under
    memory pressure would be a read a page).

        >>> import tempfile
        >>> p = Path(tempfile.mkdtemp()) / "a.npy"; np.save(p, np.arange(5, dtype=np.uint16))
        >>> map_npy(p).tolist()
        [0, 1, 2, 3, 4]
    """
    import mmap

    with open(path, "rb") as f:
        version = np.lib.format.read_magic(f)
        read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, _fortran, dtype = read(f)
        assert len(shape) == 1 and not dtype.hasobject, (shape, dtype)
        at = f.tell()
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    if hasattr(mmap, "MADV_WILLNEED"):  # Linux and macOS
        mm.madvise(mmap.MADV_WILLNEED)
    return np.frombuffer(mm, dtype=dtype, count=shape[0], offset=at)


def route_key(name: str, sequences_key: str, slots: np.ndarray, group_bounds: np.ndarray) -> str:
    """The key a route stage is recorded under: the sequences it reads and where the plan puts them."""
    digest = [
        hashlib.sha256(np.ascontiguousarray(a, dtype=np.int64).tobytes()).hexdigest() for a in (slots, group_bounds)
    ]
    return content_hash(name, sequences_key, *digest)


def group_chunks(
    lengths: np.ndarray, sequence_index: np.ndarray, bases: np.ndarray, group_bounds: np.ndarray
) -> np.ndarray:
    """``(groups + 1, shards)``: where each row group's tokens start in each routed file (the
    tokens of shard ``s`` that row group ``g`` holds are ``[chunks[g, s], chunks[g + 1, s])``).

    >>> # 2 shards (sequences 0-1, 2); slots hold sequences 2, 0 | 1; lengths 3, 4, 5
    >>> group_chunks(np.array([3, 4, 5]), np.array([2, 0, 1]), np.array([0, 2, 3]), np.array([0, 2, 3])).tolist()
    [[0, 0], [3, 5], [7, 5]]
    """
    G, S = group_bounds.size - 1, bases.size - 1
    group = np.repeat(np.arange(G, dtype=np.int64), np.diff(group_bounds))
    shard = np.searchsorted(bases, sequence_index, side="right") - 1
    # float64 weights: exact below 2**53 tokens
    counts = np.bincount(group * S + shard, weights=lengths[sequence_index], minlength=G * S).astype(np.int64)
    chunks = np.zeros((G + 1, S), dtype=np.int64)
    np.cumsum(counts.reshape(G, S), axis=0, out=chunks[1:])
    return chunks


def _sequence_rows(dirs: list[str], bases: np.ndarray, ids: np.ndarray, meta: dict[str, Any]) -> dict[str, Any]:
    """Lengths, example ids and per-sequence fields of the sequences ``ids`` (global numbers, in
    this order), from the shards' small per-sequence files."""
    shard_of = np.searchsorted(bases, ids, side="right") - 1
    local = ids - bases[shard_of]
    lengths = np.empty(ids.size, dtype=np.int64)
    example_ids = np.empty(ids.size, dtype=np.int64)
    seq_fields: dict[str, np.ndarray] = {}
    for s in np.unique(shard_of).tolist():
        m = shard_of == s
        d = Path(dirs[s])
        off = np.load(d / "offsets.npy", mmap_mode="r")
        lengths[m] = off[local[m] + 1] - off[local[m]]
        example_ids[m] = np.load(d / "example_ids.npy", mmap_mode="r")[local[m]]
        for k, dt in meta["dtypes"]["seq_fields"].items():
            arr = np.load(d / f"seq.{k}.npy", mmap_mode="r")
            if k not in seq_fields:
                seq_fields[k] = np.empty((ids.size, *arr.shape[1:]), dtype=dt)
            seq_fields[k][m] = arr[local[m]]
    return {"lengths": lengths, "example_ids": example_ids, "seq_fields": seq_fields}


def _read_group(
    routes: list[str], chunks: np.ndarray, offsets: np.ndarray, meta: dict[str, Any], skip: tuple[str, ...]
) -> dict[str, np.ndarray]:
    """One row group's token fields but ``skip``: its chunk of every routed file, in shard order
    (contiguous reads); the task's derived fields rebuilt from them."""
    derived, dtypes = meta["derived_fields"], meta["dtypes"]["token_fields"]
    tok = {}
    for k, dt in dtypes.items():
        if k in derived:
            continue
        out, at, size = np.empty(int(offsets[-1]), dtype=dt), 0, np.dtype(dt).itemsize
        for s in np.flatnonzero(chunks[1] > chunks[0]).tolist():
            n = int(chunks[1, s] - chunks[0, s])
            with open(Path(routes[s]) / f"token.{k}.bin", "rb") as f:
                f.seek(int(chunks[0, s]) * size)
                got = f.readinto(out[at : at + n].data.cast("B"))
            if got != n * size:
                raise OSError(f"{routes[s]}/token.{k}.bin: short read (a work file changed during the job)")
            at += n
        assert at == out.size, (at, out.size)
        tok[k] = out
    rule = get_task(meta["task"]).packs().derived
    assert rule is not None or not derived, derived  # a job saves derived fields only for a task that makes them
    return {
        k: rule.rebuild(k, tok, offsets, dt) if rule is not None and k in derived else tok[k]
        for k, dt in dtypes.items()
        if k not in skip
    }


def packs_stage(
    path: str,
    dirs: list[str],
    bases: np.ndarray,
    pack_offsets: np.ndarray,
    sequence_index: np.ndarray,
    plan: Any,
    meta: dict[str, Any],
    chunks: np.ndarray,
    bin_dir: str | None,
    first_pack: int,
    done: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Lay out one output shard (packs ``pack_offsets``, sequences ``sequence_index``), write it and
    record it in the job's work directory (``meta["work"]``); returns its column specs. ``chunks``:
    its row groups' rows of `group_chunks`. ``done``: the specs the driver found recorded and
    verified, the part reused as is unless ``.bin`` columns must be filled too.

    One row group (``meta["row_group_packs"]`` packs) is read, laid out and written at a time,
    so a stage holds one row group's columns, not the part's. The derived columns
    (``meta["derived_columns"]``) are not written, nor made unless the ``.bin`` files need them."""
    if done is not None and bin_dir is None:
        return done
    out = Path(path)
    rows, step = pack_offsets.size - 1, meta["row_group_packs"]
    derived = meta["derived_columns"]
    skip = () if bin_dir is not None else tuple(derived)
    specs: dict[str, Any] = {}

    def groups() -> Iterator[dict[str, np.ndarray]]:
        # the part's sequences' rows read once (each shard's files opened once, not once a row group)
        part_rows = _sequence_rows(dirs, bases, sequence_index, meta)
        for g, lo in enumerate(range(0, rows, step)):
            hi = min(rows, lo + step)
            poff = pack_offsets[lo : hi + 1]
            at = slice(int(poff[0] - pack_offsets[0]), int(poff[-1] - pack_offsets[0]))
            cols = _row_group(
                bases,
                poff - poff[0],
                sequence_index[at],
                _rows_slice(part_rows, at),
                plan,
                meta,
                chunks[g : g + 2],
                skip,
            )
            specs.update(_made_specs(cols, meta, skip))
            if bin_dir is not None:
                for col, v in cols.items():
                    mm = np.memmap(
                        Path(bin_dir) / f"{col}.bin",
                        dtype=v.dtype,
                        mode="r+",
                        offset=(first_pack + lo) * v[0].nbytes,
                        shape=v.shape,
                    )
                    mm[:] = v
                    mm.flush()
                    del mm
            yield {k: v for k, v in cols.items() if k not in derived}
            del cols  # before the next row group is made

    if done is None:
        with atomic_file(out) as tmp:
            write_parquet_groups(tmp, groups(), step, meta["compression"], meta["encoding"])
        StageLog(meta["work"]).finish(
            out.name, packs_key(out.name, first_pack, sequence_index, meta), specs, files=[out]
        )
    else:
        for _ in groups():  # only the .bin rows
            pass
    return specs


def _made_specs(cols: dict[str, np.ndarray], meta: dict[str, Any], skip: tuple[str, ...]) -> dict[str, Any]:
    """The specs of a row group's columns, in the order `materialize` makes them, ``segment_ids``
    included where it was left out (``skip``)."""
    specs = {k: {"dtype": v.dtype.name, "shape": list(v.shape[1:])} for k, v in cols.items()}
    if "segment_ids" not in skip:
        return specs
    tokens = [k for k in specs if k in meta["dtypes"]["token_fields"]]
    seg = {"dtype": segment_dtype(meta["max_depth"]).name, "shape": [meta["max_len"]]}
    return {**{k: specs[k] for k in tokens}, "segment_ids": seg, **{k: v for k, v in specs.items() if k not in tokens}}


def _rows_slice(rows: dict[str, Any], at: slice | np.ndarray) -> dict[str, Any]:
    """The rows ``at`` of `_sequence_rows`' result."""
    return {
        "lengths": rows["lengths"][at],
        "example_ids": rows["example_ids"][at],
        "seq_fields": {k: v[at] for k, v in rows["seq_fields"].items()},
    }


def _row_group(
    bases: np.ndarray,
    pack_offsets: np.ndarray,
    ids: np.ndarray,
    id_rows: dict[str, Any],
    plan: Any,
    meta: dict[str, Any],
    chunks: np.ndarray,
    skip: tuple[str, ...] = (),
) -> dict[str, np.ndarray]:
    """The columns of packs ``pack_offsets`` (from 0), holding the sequences ``ids`` in slot order
    (``id_rows``: their rows of `_sequence_rows`, in that order).

    The routed files hold them by shard, then by slot (`route_stage`): ``perm`` is that
    order, and the packing refers to each slot's place in it."""
    perm = np.argsort(np.searchsorted(bases, ids, side="right"), kind="stable")
    rows = _rows_slice(id_rows, perm)
    offsets = offsets_of(rows["lengths"])
    seqs = Sequences(
        task=meta["task"],
        offsets=offsets,
        example_ids=rows["example_ids"],
        token_fields=_read_group(meta["routes"], chunks, offsets, meta, skip),
        seq_fields=rows["seq_fields"],
        position_fields=tuple(meta["position_fields"]),
        num_examples=meta["num_examples"],
    )
    slot_to_seq = np.empty(ids.size, dtype=np.int64)
    slot_to_seq[perm] = np.arange(ids.size, dtype=np.int64)
    local = Packing(pack_offsets, slot_to_seq, seqs.lengths, plan)
    return materialize(
        seqs,
        local,
        max_len=meta["max_len"],
        max_depth=meta["max_depth"],
        position_offset=meta["position_offset"],
        without_segments="segment_ids" in skip,
    )


def packs_key(name: str, first_pack: int, sequence_index: np.ndarray, meta: dict[str, Any]) -> str:
    """The key an output part is recorded under: its packs, the sequences they hold (by number,
    and the keys of the stages that built them) and how it is written."""
    how = {
        k: meta[k]
        for k in (
            "max_len",
            "max_depth",
            "position_offset",
            "compression",
            "encoding",
            "row_group_packs",
            "derived_columns",
        )
    }
    digest = hashlib.sha256(np.ascontiguousarray(sequence_index, dtype=np.int64).tobytes()).hexdigest()
    return content_hash(name, first_pack, digest, meta["inputs_key"], how)
