"""``run_ray``: a batch job on Ray Data, a pool of :class:`~dynashape.batch.Predictor` actors.

    result = run_ray("model.onnx", "corpus.parquet", concurrency=4, address="auto")

The model's bytes go into Ray's object store once (``ray.put``); every actor fetches them
when it starts and compiles one session, so a batch never re-reads the model. Rows keep their
order (``DataContext.execution_options.preserve_order``) and come back to the driver. Each
actor reports its :class:`~dynashape.batch.BatchStats` after every call to a small stats
actor, read at the end (per-worker plan-cache hit rates). Needs ray[data] and pyarrow
(``pip install ".[ray]"`` in the checkout).
"""
from __future__ import annotations

import logging
import time
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Mapping, Optional, Sequence

from ..errors import DynashapeError, InvalidArgumentError
from .columns import column_rows
from .local_runner import collect, default_rows_per_call, progress_bar
from .predictor import Predictor
from .stats import BatchResult, BatchStats

__all__ = ["run_ray", "ray_cluster", "model_bytes", "import_ray", "quiet_ray_data_logs"]


def import_ray():
    """The ``ray`` module with Ray Data.

    Raises:
        InvalidArgumentError: Ray (with Ray Data) is not installed.
    """
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError:
        raise InvalidArgumentError('Ray is not installed: pip install "ray[data]" pyarrow (or pip install ".[ray]" in '
                                   'the dynashape checkout)') from None
    return ray


def quiet_ray_data_logs() -> None:
    """Ray Data logs every execution on the console at INFO; keep its console to warnings (its
    file logs under the Ray session folder stay complete). For callers that print their own
    progress and summary (``dynashape batch``, benchmarks/batch.py)."""
    import_ray()
    for handler in logging.getLogger("ray.data").handlers:
        if not isinstance(handler, logging.FileHandler):
            handler.setLevel(logging.WARNING)


@contextmanager
def ray_cluster(address: Optional[str] = None, **init_kwargs: Any) -> Iterator[Any]:
    """Ray, connected: the running instance when ``ray.is_initialized()``, else ``ray.init(address)``
    (None: a cluster named by ``RAY_ADDRESS`` or a new local one; ``"local"``: always a new local
    one; ``"auto"`` or ``"ray://host:10001"``: an existing cluster), shut down on exit."""
    ray = import_ray()
    if ray.is_initialized():
        yield ray
        return
    init_kwargs.setdefault("include_dashboard", False)
    init_kwargs.setdefault("logging_level", logging.WARNING)
    ray.init(address=address, **init_kwargs)
    try:
        yield ray
    finally:
        ray.shutdown()


def model_bytes(model: Any) -> bytes:
    """Serialized model bytes from a path (external data folded in, under 2 GB), bytes or a ModelProto."""
    if isinstance(model, (bytes, bytearray)):
        return bytes(model)
    if hasattr(model, "SerializeToString"):
        return model.SerializeToString()
    import onnx

    return onnx.load(str(model)).SerializeToString()


class _StatsBoard:
    """The latest :class:`BatchStats` of every worker, as plain dicts (a Ray actor)."""

    def __init__(self) -> None:
        self.stats: dict = {}

    def report(self, stats: dict) -> None:
        self.stats[stats["worker"]] = stats

    def snapshot(self) -> list:
        return list(self.stats.values())


def _dataset(ray, data: Any, input_names: Sequence[str], actor_cpus: float):
    """A Ray Dataset from whole columns, a ``.parquet`` path (read by Ray, so by the cluster) or a Dataset."""
    if isinstance(data, (str, Path)):
        path = str(data)
        if path.endswith((".npz", ".npy")):
            raise InvalidArgumentError(f"run_ray reads Parquet by path; read '{path}' with "
                                       f"dynashape.batch.read_columns and pass the columns")
        cpus = ray.cluster_resources().get("CPU", 0)
        if cpus <= actor_cpus:
            warnings.warn(f"dynashape.batch: the actors take {actor_cpus:g} of the cluster's {cpus:g} CPUs; Ray's "
                          f"Parquet read tasks need one beside them and may wait for minutes: lower concurrency or "
                          f"num_cpus, or pass dynashape.batch.read_columns(path) instead of the path",
                          RuntimeWarning, stacklevel=3)
        return ray.data.read_parquet(path)
    if isinstance(data, Mapping):
        names = [n for n in input_names if n in data]
        rows = {n: column_rows(data[n]) for n in names}
        n = len(rows[names[0]]) if names else 0
        return ray.data.from_items([{k: rows[k][i] for k in names} for i in range(n)])
    return data


def _user_error(exc: BaseException) -> Optional[BaseException]:
    """The dynashape error a Ray exception wraps (a worker's InvalidFeedError, ...), if any."""
    seen = set()
    at: Optional[BaseException] = exc
    while at is not None and id(at) not in seen:
        seen.add(id(at))
        if isinstance(at, DynashapeError) and type(at).__module__.startswith("dynashape"):
            return at
        at = getattr(at, "cause", None) or at.__cause__
    return None


def run_ray(model: Any, data: Any, output_names: Optional[Sequence[str]] = None, *, concurrency: int = 1,
            rows_per_call: Optional[int] = None, address: Optional[str] = None, num_cpus: float = 1,
            progress: bool = False, predictor: type = Predictor, **predictor_kwargs: Any) -> BatchResult:
    """Predict every row of ``data`` on a pool of ``concurrency`` Ray actors.

    Args:
        model: a path, bytes or ``onnx.ModelProto`` (shipped once through the object store).
        data: whole columns ``{input: column}`` (as :func:`~dynashape.batch.run_local`), a
            Parquet path, folder or URI (``s3://...``; read by Ray's tasks, so the cluster must see the path,
            and they need CPUs beside the actors': warned when the actors take them all) or a
            ``ray.data.Dataset``.
        output_names: the outputs (default all).
        concurrency: actors (one session each), ``num_cpus`` CPUs each.
        rows_per_call: rows per actor call (``map_batches``' batch_size; default ``8 * batch_size``).
        address: for ``ray.init`` when Ray is not initialized yet (see :func:`ray_cluster`).
        progress: our progress bar on stderr (Ray's own bars are turned off meanwhile).
        predictor: the class the actors run: :class:`~dynashape.batch.Predictor` or a subclass.
        **predictor_kwargs: :class:`~dynashape.batch.Predictor`'s.

    Returns:
        A :class:`~dynashape.batch.BatchResult`: each output's rows in input order, one
        :class:`~dynashape.batch.BatchStats` per actor; ``wall_s`` includes the actors' start.

    Raises:
        InvalidArgumentError: Ray not installed, a bad ``concurrency`` / ``rows_per_call``.
        BatchAxisError, InvalidFeedError, ...: as the predictor (checked in the driver first,
            then unwrapped from the worker's Ray error).
    """
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise InvalidArgumentError(f"concurrency must be an int >= 1, got {concurrency!r}")
    # the driver builds the predictor once: a model or option the workers would refuse fails here, clearly
    check = predictor(model, output_names, keep_columns=False, **predictor_kwargs)
    blob = model_bytes(model)
    names, inputs = check.output_names, [vi.name for vi in check.layout.inputs]
    per_call = rows_per_call if rows_per_call is not None else default_rows_per_call(check.batch_size)
    if isinstance(per_call, bool) or not isinstance(per_call, int) or per_call < 1:
        raise InvalidArgumentError(f"rows_per_call must be an int >= 1, got {rows_per_call!r}")
    del check
    with ray_cluster(address) as ray:
        ctx = ray.data.DataContext.get_current()
        # raise_original_map_exception: a worker's InvalidFeedError reaches us as itself, not as Ray's
        # UserCodeException with the cause only in its message (older Rays lack the flag)
        saved = (ctx.execution_options.preserve_order, ctx.enable_progress_bars,
                 getattr(ctx, "raise_original_map_exception", None))
        ctx.execution_options.preserve_order = True
        ctx.enable_progress_bars = saved[1] and not progress
        if saved[2] is not None:
            ctx.raise_original_map_exception = True
        board = ray.remote(_StatsBoard).options(num_cpus=0).remote()
        try:
            ds = _dataset(ray, data, inputs, concurrency * num_cpus)
            total = len(next(iter(data.values()))) if isinstance(data, Mapping) and data else None
            kwargs = dict(predictor_kwargs, model=ray.put(blob), output_names=names, keep_columns=False,
                          stats_sink=board)
            out = ds.map_batches(predictor, fn_constructor_kwargs=kwargs, batch_size=per_call, batch_format="numpy",
                                 compute=ray.data.ActorPoolStrategy(size=concurrency), num_cpus=num_cpus)
            outputs: dict = {name: [] for name in names}
            t0 = time.perf_counter()
            with progress_bar(total, progress) as bar:
                for batch in out.iter_batches(batch_size=None, batch_format="numpy"):
                    bar.update(collect(outputs, batch, names))
            wall = time.perf_counter() - t0
            workers = [BatchStats.from_dict(d) for d in ray.get(board.snapshot.remote())]
        except Exception as exc:
            cause = _user_error(exc)
            if cause is not None and cause is not exc:
                raise cause from None
            raise
        finally:
            ctx.execution_options.preserve_order, ctx.enable_progress_bars = saved[:2]
            if saved[2] is not None:
                ctx.raise_original_map_exception = saved[2]
    return BatchResult(outputs, workers, wall)
