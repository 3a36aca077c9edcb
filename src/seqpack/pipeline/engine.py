"""Where the stages of a sharded job run: this process (``local``) or a Ray cluster (``ray``).

A stage is a top-level function applied to a list of small, picklable work items (paths,
index ranges, configs); it reads and writes shards itself, so token data never travels
through the engine. ``map`` yields results in item order, with a bounded number in flight,
so the driver's memory does not grow with the number of shards. Both engines run the
same functions on the same items, so they write the same bytes.

    engine = get_engine("local")
    squares = list(engine.map(pow, [(2, 2), (3, 2)]))   # [4, 9]
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from itertools import islice
from typing import Any

from seqpack._parallel import default_workers
from seqpack.errors import UserError

ENGINES = ("local", "ray")


def default_shards_at_once() -> int:
    """Shards processed at once when no count is asked for: two where there are two cores or more
    (one shard's stage leaves a core idle while it reads, hashes or writes; a third adds memory, not
    speed, where the kernels already use every core)."""
    return min(2, default_workers())


class LocalEngine:
    """Stages in this process, on ``shards_at_once`` threads (default `default_shards_at_once`;
    the compiled kernels and pyarrow release the GIL; memory grows with ``shards_at_once``)."""

    name = "local"

    def __init__(self, shards_at_once: int | None = None) -> None:
        n = default_shards_at_once() if shards_at_once is None else shards_at_once
        if n < 1:
            raise UserError(f"--shards-at-once must be >= 1, got {n}")
        cores = default_workers()
        if n > max(cores, 2):  # each shard in flight is held in memory: memory grows with the count, speed with cores
            raise UserError(
                f"--shards-at-once {n}: more shards at once than this machine's {cores} core(s) add no speed "
                f"and hold one shard each in memory; pass --shards-at-once {max(cores, 2)} or less"
            )
        self.shards_at_once = n

    def map(self, fn: Callable[..., Any], items: Iterable[tuple[Any, ...]]) -> Iterator[Any]:
        """``fn(*item)`` of each item, in the items' order, `shards_at_once` in flight.

        Args:
            fn: a stage function.
            items: its arguments, one tuple per stage.

        Returns:
            The stages' results, as each is due.
        """
        if self.shards_at_once == 1:
            for item in items:
                yield fn(*item)
            return
        from concurrent.futures import ThreadPoolExecutor

        it = iter(items)
        with ThreadPoolExecutor(self.shards_at_once, thread_name_prefix="seqpack-stage") as pool:
            pending = [pool.submit(fn, *item) for item in islice(it, self.shards_at_once)]
            while pending:
                result = pending.pop(0).result()
                pending.extend(pool.submit(fn, *item) for item in islice(it, 1))
                yield result

    def close(self) -> None:
        """Nothing to release: the threads end with each `map`."""


class RayEngine:
    """Stages as Ray tasks, on a local Ray instance or the cluster at ``address``.

    A task whose worker dies (killed, out of memory, its node lost) runs again, up to ``retries``
    times: every stage writes its outputs whole or not at all and the same bytes each time, so the
    job's output is the same. A task that loses its worker every time fails the job with a
    `ChildProcessError` (one line); the tasks still in flight are cancelled, and the stages that
    finished are kept for the next run of the same command."""

    name = "ray"
    #: times a task whose worker died runs again (an error the task raises is never retried)
    retries = 3

    def __init__(self, address: str | None = None, *, num_cpus: int | None = None, window: int | None = None) -> None:
        try:
            import ray
        except ImportError:
            raise UserError("--engine ray needs Ray: pip install 'seqpack[ray]' (or pip install ray)") from None
        self._ray = ray
        self._started = False
        if not ray.is_initialized():
            if address:
                _check_reachable(address)
            try:
                if address:
                    ray.init(address=address, log_to_driver=False, include_dashboard=False)
                else:
                    ray.init(num_cpus=num_cpus, log_to_driver=False, include_dashboard=False)
            except Exception as e:  # ConnectionError, TimeoutError, ray's own
                where = f"Ray cluster at {address}" if address else "a local Ray instance"
                raise UserError(
                    f"cannot connect to {where}: {str(e).splitlines()[0] if str(e) else type(e).__name__}"
                ) from e
            self._started = True
        self.window = window or max(2, 2 * int(ray.cluster_resources().get("CPU", 1)))

    def map(self, fn: Callable[..., Any], items: Iterable[tuple[Any, ...]]) -> Iterator[Any]:
        """``fn(*item)`` of each item as a Ray task (retried on a lost worker), in the items' order.

        Args:
            fn: a stage function (sent to the workers by value).
            items: its arguments, one tuple per stage.

        Returns:
            The stages' results, as each is due.

        Raises:
            ChildProcessError: a worker died running a stage, past its retries (one line; the stages
                that finished are kept). A stage's own error is raised as it is.
        """
        ray = self._ray
        remote = ray.remote(max_retries=self.retries)(_apply)
        lost = _lost_worker_errors(ray)
        pending: list[Any] = []
        it = iter(items)
        try:
            while True:
                while len(pending) < self.window:
                    item = next(it, None)
                    if item is None:
                        break
                    pending.append(remote.remote(fn, *item))
                if not pending:
                    return
                try:
                    yield ray.get(pending.pop(0))
                except ray.exceptions.RayTaskError as e:
                    raise e.as_instanceof_cause() from None
                except lost as e:
                    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                    raise ChildProcessError(
                        f"a Ray worker died running a task of this job, {self.retries + 1} times ({first}); "
                        "the stages that finished are kept: run the same command again to finish the job"
                    ) from None
        finally:  # the job stops here (an error, or its reader stopped): none of its tasks writes on behind it
            _cancel(ray, pending)

    def close(self) -> None:
        """Shut down the Ray instance this engine started (a cluster it joined keeps running)."""
        if self._started:
            self._ray.shutdown()
            self._started = False


Engine = LocalEngine | RayEngine


def _apply(fn: Callable[..., Any], *args: Any) -> Any:
    return fn(*args)


def _lost_worker_errors(ray: Any) -> tuple[type[BaseException], ...]:
    """Ray's errors for a task whose worker, node or result was lost (each retried first)."""
    names = ("WorkerCrashedError", "NodeDiedError", "OutOfMemoryError", "ObjectLostError", "LocalRayletDiedError")
    return tuple(c for c in (getattr(ray.exceptions, n, None) for n in names) if isinstance(c, type))


def _cancel(ray: Any, refs: list[Any], timeout: float = 30.0) -> None:
    """Stop the tasks ``refs`` (a running one's worker is killed) and wait until they have stopped."""
    if not refs:
        return
    import contextlib

    for ref in refs:
        with contextlib.suppress(Exception):  # finished already, or its worker gone: nothing left to stop
            ray.cancel(ref, force=True)
    with contextlib.suppress(Exception):  # Ray shut down: nothing left running
        ray.wait(refs, num_returns=len(refs), timeout=timeout)


def _check_reachable(address: str, timeout: float = 3.0) -> None:
    """Fail fast on a cluster address that does not answer (Ray itself waits for minutes)."""
    import socket

    hostport = address.split("://", 1)[-1]
    if hostport == "auto" or ":" not in hostport:
        return  # Ray resolves these itself, quickly
    host, _, port = hostport.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            pass
    except (OSError, ValueError):
        raise UserError(
            f"cannot reach a Ray cluster at {address} (no answer within {timeout:.0f} s); "
            "check --ray-address, or leave it out to start a local Ray instance"
        ) from None


def get_engine(
    name: str = "local",
    *,
    address: str | None = None,
    num_cpus: int | None = None,
    shards_at_once: int | None = None,
) -> Engine:
    """The engine that runs a sharded job's stages.

    Args:
        name: ``"local"`` (this process, on threads) or ``"ray"`` (a Ray cluster).
        address: ray: an existing cluster (``ray://head:10001``, ``auto``); ``None``: a local Ray instance.
        num_cpus: ray: the CPUs of a local instance (``None``: all of them).
        shards_at_once: local: shards processed at once (``None``: `default_shards_at_once`).

    Returns:
        A `LocalEngine` or a `RayEngine`.

    Raises:
        UserError: an unknown ``name``, or ``address`` without ray.
    """
    if name == "local":
        if address:
            raise UserError("--ray-address needs --engine ray")
        return LocalEngine(shards_at_once)
    if name == "ray":
        return RayEngine(address, num_cpus=num_cpus)
    raise UserError(f"engine must be one of {'|'.join(ENGINES)}, got {name!r}")
