"""The local engine: applies a ``RescalePlan`` with pyarrow in this process, streaming.

Peak memory is bounded by a few batches and one row group (parallelism change), or by one re-hash bucket
(maxParallelism change), never by the snapshot size:

- parallelism change: new subtasks are written one after the other; each streams its pieces of the old
  files (row groups outside the piece are skipped) into its writer;
- maxParallelism change: a first pass re-hashes every batch and appends its rows to per-bucket Arrow IPC
  spill files (in input order) under the target directory; a second pass writes each new subtask bucket by
  bucket, stably sorted by key group; the spill files are removed before the executor returns.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path

import pyarrow as pa

from keygroup_cli.execution import ExecutionResult, OnProgress, WrittenOperator, keyed_pipeline, tasks
from keygroup_cli.execution.keyed_pipeline import KeyedJob
from keygroup_cli.flink.keyed_tasks import WrittenKeyedFile
from keygroup_cli.planning import OperatorPlan, RescalePlan
from keygroup_cli.snapshot.model import KeyedFile, Operator, Snapshot
from keygroup_cli.snapshot.parquet import DEFAULT_BATCH_ROWS, iter_keyed_batches

SPILL_DIR = ".kg-spill"


def _ignore(_stage: str, _completed: int, _total: int | None) -> None:
    return None


class LocalExecutor:
    """Rescale with pyarrow in this process (no JVM)."""

    name = "local"

    def __init__(self, batch_rows: int = DEFAULT_BATCH_ROWS) -> None:
        self.batch_rows = batch_rows

    def run(
        self, plan: RescalePlan, source: Snapshot, target: Path, on_progress: OnProgress | None = None
    ) -> ExecutionResult:
        """Write every state file of the rescaled snapshot into ``target``."""
        report = on_progress or _ignore
        written = []
        for op_plan in plan.operators:
            op = _operator(source, op_plan)
            if not op_plan.rescaled:
                tasks.copy_files(source, target, (*op.keyed_files, *op.operator_files))
                written.append(WrittenOperator(op.operator_id, op.keyed_files, op.operator_files))
                continue
            keyed = self._keyed(source, op, op_plan, target, report)
            operator_files = tasks.write_operator_state(source, op, op_plan, target)
            written.append(WrittenOperator(op.operator_id, keyed, operator_files))
        return ExecutionResult(self.name, tuple(written))

    def _keyed(
        self, source: Snapshot, op: Operator, plan: OperatorPlan, target: Path, report: OnProgress
    ) -> tuple[KeyedFile, ...]:
        if plan.keyed_mode == "none":
            return ()
        if plan.keyed_mode == "copy":
            tasks.copy_files(source, target, op.keyed_files)
            rows = plan.keyed_rows or 0  # a kg snapshot's plan always counts its rows
            report(f"{plan.label}: keyed rows", rows, rows)
            return op.keyed_files
        stage = f"{plan.label}: keyed rows"
        done = 0

        def on_rows(rows: int) -> None:
            nonlocal done
            done += rows
            report(stage, done, plan.keyed_rows)

        report(stage, 0, plan.keyed_rows)
        if plan.keyed_mode == "move":
            files = [
                tasks.write_moved_subtask(
                    source, op, plan, j, target, batch_rows=self.batch_rows, on_rows=on_rows
                )
                for j in range(plan.new_parallelism)
            ]
        else:
            files = self._rehash(source, op, plan, target, on_rows)
        return tuple(f for f in files if f is not None)

    def _rehash(
        self, source: Snapshot, op: Operator, plan: OperatorPlan, target: Path, on_rows: tasks.OnRows
    ) -> list[KeyedFile | None]:
        spill = target / SPILL_DIR / op.operator_id
        spill.mkdir(parents=True)
        writers: dict[int, pa.ipc.RecordBatchStreamWriter] = {}
        try:
            for old in sorted(op.keyed_files, key=lambda f: f.subtask):
                for batch in iter_keyed_batches(source, old, batch_rows=self.batch_rows):
                    table, buckets = tasks.rehash_batch(batch, op, plan)
                    for bucket, rows in tasks.split_by_bucket(table, buckets):
                        if bucket not in writers:
                            writers[bucket] = pa.ipc.new_stream(spill / f"{bucket:05d}.arrow", rows.schema)
                        writers[bucket].write_table(rows)
                    on_rows(batch.num_rows)
            for writer in writers.values():
                writer.close()
            writers.clear()
            return [
                tasks.write_rehashed_subtask(
                    op,
                    plan,
                    j,
                    target,
                    _read_spilled(
                        spill / f"{bucket:05d}.arrow"
                        for bucket in tasks.buckets_for(rng, plan.new_max_parallelism)
                    ),
                )
                for j, rng in enumerate(plan.new_ranges)
            ]
        finally:
            for writer in writers.values():
                writer.close()
            shutil.rmtree(target / SPILL_DIR, ignore_errors=True)

    def read_pieces(self) -> int:
        """Return 1: this engine runs read tasks one after the other, so one per file is enough."""
        return 1

    def run_keyed(
        self, jobs: list[KeyedJob], scratch: Path, on_progress: OnProgress | None = None
    ) -> dict[str, list[WrittenKeyedFile]]:
        """Run every job in this process: route every read task into spill files, then write each subtask.

        The spill holds one Arrow IPC stream per (new subtask, bucket), appended in input order, so memory
        is bounded by a batch while routing and by one bucket while writing.
        """
        report = on_progress or _ignore
        stage = "re-hash keyed state (bytes)"
        total = sum(job.bytes for job in jobs)
        done = 0
        report(stage, 0, total)
        written: dict[str, list[WrittenKeyedFile]] = {}
        for job in jobs:
            spill = scratch / SPILL_DIR / job.operator_id
            spill.mkdir(parents=True)
            writers: dict[tuple[int, int], pa.ipc.RecordBatchStreamWriter] = {}
            routed = 0
            try:
                for task in job.reads:
                    for new_subtask, bucket, rows in keyed_pipeline.route(job, task, self.batch_rows):
                        writer = writers.get((new_subtask, bucket))
                        if writer is None:
                            path = _spill_file(spill, new_subtask, bucket)
                            writer = writers[(new_subtask, bucket)] = pa.ipc.new_stream(path, rows.schema)
                        writer.write_table(rows)
                        routed += rows.num_rows
                    done += task.bytes
                    report(stage, done, total)
                for writer in writers.values():
                    writer.close()
                writers.clear()
                files = [
                    keyed_pipeline.write(
                        job,
                        j,
                        _read_spilled(
                            _spill_file(spill, j, bucket)
                            for bucket in tasks.buckets_for(write.key_groups, job.new_max_parallelism)
                        ),
                    )
                    for j, write in enumerate(job.writes)
                ]
            finally:
                for writer in writers.values():
                    writer.close()
                shutil.rmtree(spill, ignore_errors=True)
            written[job.operator_id] = keyed_pipeline.check_counts(job, routed, files)
        return written


def _read_spilled(paths: Iterable[Path]) -> Iterator[pa.Table]:
    """Yield the spill files that exist among ``paths``, in order, each read when reached (memory: one)."""
    for path in paths:
        if path.exists():
            with pa.OSFile(str(path)) as fh:
                yield pa.ipc.open_stream(fh).read_all()


def _spill_file(spill: Path, new_subtask: int, bucket: int) -> Path:
    return spill / f"{new_subtask:05d}-{bucket:05d}.arrow"


def _operator(source: Snapshot, plan: OperatorPlan) -> Operator:
    op = source.manifest.operator(plan.operator_id)
    assert op is not None, "the plan was made from this snapshot"
    return op
