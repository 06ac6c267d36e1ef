"""``kg rescale``: rewrite a kg snapshot or a Flink savepoint for a new parallelism (and maxParallelism)."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import click

from keygroup_cli.cli.inputs import job_option, resolve_input
from keygroup_cli.cli.options import (
    migration_options,
    migration_request,
    operator_option,
    output_options,
    require_option,
    savepoint_format_option,
    subtasks_option,
    to_parallelism_option,
)
from keygroup_cli.cli.progress import progress
from keygroup_cli.cli.render import Output, output_for

if TYPE_CHECKING:
    from rich.console import Console

    from keygroup_cli.execution.options import EngineOptions
    from keygroup_cli.k8s import DeploymentPatch, FlinkDeployment
    from keygroup_cli.planning.plan import RescalePlan
    from keygroup_cli.planning.request import RescaleRequest

EPILOG = """\b
Examples:
  kg rescale snapshot/ --to 4 --out rescaled/
  kg rescale snapshot/ --to 4 --out rescaled/ --engine local
  kg rescale snapshot/ -p 8 --out rescaled/ --from 4 -o counter --json
  kg rescale snapshot/ --to 8 --out rescaled/ --max-parallelism 1024   # re-hashes every key
  kg rescale snapshot/ --to 4 --out rescaled/ --dry-run                # prints `kg plan`'s output
  kg rescale savepoint-1a2b/ --from 3 --to 4 --out savepoint-p4/       # a Flink savepoint in, one out
  kg rescale savepoint-1a2b/ --to 8 -m 1024 --out savepoint-m1024/     # what Flink refuses at restore
  kg rescale savepoint-1a2b/ --to 4 --out sp-p4/ --format native       # RocksDB / ForSt database files
  kg rescale savepoint-1a2b/ --to 8 -m 1024 --out sp/ --engine local --workers 2   # two threads
  kg rescale savepoint-1a2b/ --to 8 --out sp-p8/ --rename counter=counter-v2 --drop old-dedup
  kg rescale zk://zk1:2181/flink/my-cluster --to 8 --out sp-p8/   # refused (exit 7) while a leader is live
  kg rescale s3://bkt/savepoints/sp-1a2b --from 3 --to 4 --out s3://bkt/savepoints/sp-1a2b-p4
  kg rescale snap/ --to 4 --out r/ --master spark://host:7077 --conf spark.pyspark.python=/opt/kg/bin/python
  kg rescale deployment.yaml -m 600 --out s3://bkt/sp-m600 --output patch > patch.json   # FlinkDeployment

SNAPSHOT is a kg snapshot, or a Flink savepoint or retained checkpoint (then DEST is a canonical savepoint):
canonical, NATIVE (HashMap; RocksDB with the [rocksdb] extra), a HashMap checkpoint or a RocksDB
incremental checkpoint. With --from P and no --operator, the operators at parallelism P
are rescaled and the others keep theirs (a new maxParallelism still applies to all of them). Without
--from or --operator every operator goes to Q; when operators with state run at different parallelisms
(a non-parallel source at 1), a warning on stderr (and "warnings" in JSON) names the ones not at the
most common parallelism P and suggests --from P: kg plan and --dry-run before anything is written, the
rescale once it has committed. --dry-run validates as the rescale does (same refusals, DEST included)
and prints `kg plan`'s output; for a savepoint it reads _metadata, the keyed headers and operator
state, never keyed state.
--format native writes the keyed state of a savepoint's output as one RocksDB database per subtask, in
the layout of Flink's NATIVE savepoints, which RocksDB and ForSt jobs (Flink 2.x) restore by ingesting
the files (needs the [rocksdb] extra); the default, canonical, is what every backend restores. Without
--format, state of the async state API (State V2), which Flink restores only from a NATIVE savepoint, is
written native, and kg says so (savepoint_format_reason in JSON); --format canonical refuses it (exit 4).
--rename, --assign-uid and --drop are kg migrate's operator migration, done in the same pass on a savepoint
(same refusals, exit 2; the checkpoint id is kept); --operator names an operator by its uid before or
after it; --dry-run prints the migration above the plan.
DEST must not exist; the result is committed by an atomic rename, and on any failure nothing is left there.
SNAPSHOT and DEST may be object-store URIs (s3://, s3a://, s3p://, gs://, abfs://, hdfs://). A savepoint
or checkpoint in the canonical format is read in place, by ranged reads; one in the HashMap backend's own
layout or in RocksDB's files (which kg rewrites in the canonical layout first) and a kg snapshot are
downloaded to a scratch directory ($KG_SCRATCH_DIR) first. An object-store DEST must hold no object; it is
written state files first and _metadata (or _manifest.json) last, so it is a savepoint only once complete.

The default engine is local on one machine (past its start Spark's cores do no more per byte, and its start
costs about 3 CPU seconds), except for a re-key of 1 GiB or more without the native kernels (kg[native])
or written with --format native, which Spark local[*] runs faster on several cores; and spark once a master
is set (--master, --conf spark.master=..., SPARK_MASTER). The summary and --json say which and why.
Spark's Python workers run kg's own interpreter in local mode; PYSPARK_PYTHON or --conf
spark.pyspark.python=... choose another (on a cluster, the executors' Python).

SNAPSHOT may be a Flink Kubernetes Operator FlinkDeployment (YAML or JSON, as kubectl prints it): kg
rescales the state it starts from (as kg inspect shows) and prints the change that redeploys it from DEST:
spec.job.initialSavepointPath (DEST), spec.job.savepointRedeployNonce (one more),
spec.flinkConfiguration pipeline.max-parallelism and spec.job.parallelism (--to, default the
deployment's). --output patch prints only that JSON merge patch (kubectl patch flinkdeployment NAME --type
merge -p "$(...)"), --output snapshot a FlinkStateSnapshot that registers DEST (alreadyExists: true);
--patch-format yaml prints either as YAML. DEST must be a path the JobManager can read (an object store).
--dry-run prints the plan and the patch the rescale would print for DEST (with --output patch or snapshot
only that), writing nothing.
"""


@click.command(epilog=EPILOG)
@click.argument("snapshot", type=click.Path(path_type=str))
@job_option
@to_parallelism_option("New parallelism (with a FlinkDeployment: default its parallelism).", required=False)
@click.option(
    "--out",
    "dest",
    type=click.Path(path_type=str),
    required=True,
    metavar="DEST",
    help="New snapshot or savepoint: a path, or a URI (s3://, gs://, abfs://, hdfs://).",
)
@click.option(
    "--from",
    "from_parallelism",
    type=int,
    metavar="P",
    help="Rescale the operators now at P (with --operator: refuse unless they are at P).",
)
@operator_option()
@click.option("--max-parallelism", "-m", "max_parallelism", type=int, metavar="M", help="New maxParallelism.")
@click.option(
    "--engine",
    type=click.Choice(["spark", "local"]),
    default=None,
    envvar="KG_ENGINE",
    show_envvar=True,
    help="spark: PySpark tasks; local: streaming pyarrow in this process (no JVM). "
    "[default: spark if pyspark is installed, else local]",
)
@click.option(
    "--master",
    metavar="URL",
    envvar="KG_MASTER",
    show_envvar=True,
    help="Spark master URL (default: embedded local[*]).",
)
@click.option(
    "--conf",
    "spark_conf",
    multiple=True,
    metavar="KEY=VALUE",
    callback=lambda _ctx, _param, values: _parse_conf(values),
    help="A Spark setting for the session kg starts (repeatable), e.g. spark.pyspark.python=PATH.",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    envvar="KG_WORKERS",
    show_envvar=True,
    help="Threads kg itself uses on this machine: the local engine's re-key and the key-group copy, "
    "about 27 MiB each. [default: the machine's cores, at most 4]",
)
@savepoint_format_option()
@migration_options
@subtasks_option()
@click.option("--verbose", is_flag=True, help="Show Spark's own log output.")
@click.option(
    "--dry-run",
    is_flag=True,
    help="Validate, print the plan (exactly as `kg plan` does; with a FlinkDeployment also the patch the "
    "rescale prints) and write nothing.",
)
@click.option(
    "--output",
    "output",
    type=click.Choice(["summary", "patch", "snapshot"]),
    default="summary",
    show_default=True,
    help="With a FlinkDeployment: print the result (summary), only the merge patch for kubectl patch "
    "--type merge (patch), or only a FlinkStateSnapshot registering DEST (snapshot).",
)
@click.option(
    "--patch-format",
    type=click.Choice(["json", "yaml"]),
    default="json",
    show_default=True,
    help="How --output patch/snapshot print (YAML needs PyYAML, the [k8s] extra).",
)
@output_options
@click.pass_context
def command(
    ctx: click.Context,
    snapshot: str,
    job: str | None,
    to_parallelism: int | None,
    dest: str,
    from_parallelism: int | None,
    operators: tuple[str, ...],
    max_parallelism: int | None,
    engine: str | None,
    master: str | None,
    spark_conf: dict[str, str],
    workers: int | None,
    output_format: str | None,
    rename: tuple[str, ...],
    assign_uid: tuple[str, ...],
    drop: tuple[str, ...],
    subtasks: bool,
    verbose: bool,
    dry_run: bool,
    output: str,
    patch_format: str,
) -> None:
    """Rescale SNAPSHOT (kg or Flink savepoint) to Q subtasks into DEST, as Flink would redistribute it."""
    out = output_for(ctx)
    source = resolve_input(out, snapshot, job, refuse_live_leader=not dry_run)
    typed, snapshot = snapshot, source.path
    deployment = source.deployment.deployment if source.deployment is not None else None
    if deployment is None and output != "summary":
        raise click.UsageError("--output patch and --output snapshot need a FlinkDeployment as SNAPSHOT.")
    if to_parallelism is None:
        to_parallelism = deployment.parallelism if deployment is not None else None
        if to_parallelism is None:
            require_option(ctx, "to_parallelism")
    from keygroup_cli.planning.request import RescaleRequest

    request = RescaleRequest.of(
        to_parallelism,
        from_parallelism=from_parallelism,
        operators=operators,
        new_max_parallelism=max_parallelism,
        output_format=output_format,
        migration=migration_request(rename, assign_uid, drop),
    )
    if dry_run:
        from keygroup_cli.cli.commands.plan import show_snapshot_plan

        require_free_destination(snapshot, dest)
        if deployment is None:
            show_snapshot_plan(out, snapshot, request, typed, subtasks)
        else:
            _dry_run_deployment(
                out, (typed, snapshot), dest, request, subtasks, (deployment, output, patch_format)
            )
        return
    from keygroup_cli.execution.engines import start_early
    from keygroup_cli.execution.options import EngineOptions

    options = EngineOptions(
        engine=engine, master=master, spark_conf=spark_conf or None, verbose=verbose, workers=workers
    )
    # Where the run will use Spark whatever the input holds, its JVM starts while kg opens the input.
    rekey = max_parallelism is not None or output_format == "native"
    start_early(engine, rekey=rekey, master=master, spark_conf=spark_conf or None, verbose=verbose)
    _run(out, (typed, snapshot), dest, request, options, subtasks, (deployment, output, patch_format))


def _run(
    out: Output,
    source: tuple[str, str],
    dest: str,
    request: RescaleRequest,
    options: EngineOptions,
    subtasks: bool = False,
    k8s: tuple[FlinkDeployment | None, str, str] = (None, "summary", "json"),
) -> None:
    """Run the rescale of ``source`` (as typed, as read) into ``dest`` and print what it did.

    ``k8s``: the FlinkDeployment SNAPSHOT named (if any), ``--output`` and ``--patch-format``.
    """
    from keygroup_cli.cli.rescale_render import (
        mixed_parallelism_warning,
        render_rescale,
        rescale_document,
    )
    from keygroup_cli.execution.routes.rescale import run_rescale

    typed, snapshot = source
    started = time.monotonic()
    from keygroup_cli.cli.commands.plan import from_hint

    with progress(out) as on_progress, from_hint(snapshot, request):
        # run_rescale() plans as kg plan does and refuses an input that kg verify rejects (its gate runs
        # inside the library), then executes that plan.
        result = run_rescale(snapshot, dest, request, options, on_progress)
    # The wall time a user waited.
    result = replace(result, wall_seconds=time.monotonic() - started)
    # Named once the rescale validated and committed (a failure stays one line on stderr); --dry-run and
    # kg plan name them before anything is written.
    names = {op.operator_id: op.name for op in result.manifest.operators}
    warnings = mixed_parallelism_warning(
        result.plan, request.from_parallelism, request.operators or (), names
    )
    for warning in warnings:
        # What was written differs from what a plain switch would write: said even under -q.
        out.warn(warning, even_quiet=True)
    document = {**rescale_document(result, typed, dest), "warnings": warnings}
    deployment, output, patch_format = k8s
    if deployment is None:
        out.result("rescale", document, lambda console: render_rescale(console, document, subtasks))
        return
    from keygroup_cli.cli.k8s_render import render_patch

    patch = _redeploy_patch(
        deployment,
        dest,
        result.plan,
        request.new_parallelism,
        result.manifest.snapshot_id,
        result.savepoint_format,
    )
    if _print_patch_only(patch, output, patch_format):
        return
    document["patch"] = patch.document()

    def text(console: Console) -> None:
        render_rescale(console, document, subtasks)
        render_patch(console, patch, patch_format)

    out.result("rescale", document, text)


def _dry_run_deployment(
    out: Output,
    source: tuple[str, str],
    dest: str,
    request: RescaleRequest,
    subtasks: bool,
    k8s: tuple[FlinkDeployment, str, str],
) -> None:
    """Print the plan of a FlinkDeployment's rescale and the patch the run would print, writing nothing.

    The patch is built from the plan as the run builds it from the plan it executes (``_redeploy_patch``):
    DEST, the planned maxParallelism, the parallelism, the input's checkpoint id (which the rescale keeps)
    and the savepoint format the plan writes. ``--output patch``/``snapshot`` print only that, as a run
    does.
    """
    from keygroup_cli.cli.commands.plan import plan_snapshot
    from keygroup_cli.cli.k8s_render import render_patch
    from keygroup_cli.cli.rescale_render import operator_names, planned_document, render_snapshot_plan

    typed, snapshot = source
    deployment, output, patch_format = k8s
    planned = plan_snapshot(out, snapshot, request)
    document = planned_document(typed, planned)
    for warning in document["warnings"]:
        out.warn(warning, even_quiet=True)  # what the rescale would write: said even under -q
    if planned.input.savepoint is not None:
        checkpoint_id: int | None = planned.input.savepoint.metadata.checkpoint_id
    else:
        checkpoint_id = None if planned.snapshot is None else planned.snapshot.manifest.snapshot_id
    patch = _redeploy_patch(
        deployment, dest, planned.plan, request.new_parallelism, checkpoint_id, planned.savepoint_format
    )
    if _print_patch_only(patch, output, patch_format):
        return
    document = {**document, "patch": patch.document()}
    names = operator_names(planned)

    def text(console: Console) -> None:
        render_snapshot_plan(console, planned.plan, document, names, subtasks)
        render_patch(console, patch, patch_format)

    out.result("plan", document, text)


def _redeploy_patch(
    deployment: FlinkDeployment,
    dest: str,
    plan: RescalePlan,
    parallelism: int,
    checkpoint_id: int | None,
    savepoint_format: str | None,
) -> DeploymentPatch:
    """Return the patch that redeploys ``deployment`` from DEST, for the run and for ``--dry-run`` alike."""
    from keygroup_cli.k8s import deployment_patch
    from keygroup_cli.storage import is_remote

    keyed = [op for op in plan.operators if op.keyed_mode != "none"]
    return deployment_patch(
        deployment,
        savepoint_path=dest if is_remote(dest) else str(Path(dest).absolute()),
        max_parallelism=min(op.new_max_parallelism for op in keyed or plan.operators),
        parallelism=parallelism,
        checkpoint_id=checkpoint_id,
        format_type="NATIVE" if savepoint_format == "native" else "CANONICAL",
    )


def _print_patch_only(patch: DeploymentPatch, output: str, patch_format: str) -> bool:
    """Print only the merge patch (``--output patch``) or the FlinkStateSnapshot (``snapshot``), if asked."""
    from keygroup_cli.k8s import dump

    if output == "patch":
        click.echo(dump(patch.merge_patch(), patch_format))
        return True
    if output == "snapshot":
        click.echo(dump(patch.snapshot_resource(), patch_format))
        return True
    return False


def _parse_conf(values: tuple[str, ...]) -> dict[str, str]:
    conf = {}
    for value in values:
        key, sep, setting = value.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{value!r} is not KEY=VALUE", param_hint="'--conf'")
        conf[key.strip()] = setting
    return conf


def require_free_destination(source: str, dest: str) -> None:
    """Refuse a DEST the rescale would refuse, writing nothing: inside the input, existing, occupied.

    Raises:
        InvalidArgumentError: ``DESTINATION_INSIDE_INPUT``, ``DESTINATION_EXISTS``, or an object-store
            DEST that holds objects.
    """
    from keygroup_cli.storage import is_remote
    from keygroup_cli.storage.staging import require_absent, require_outside_input

    local = dest if is_remote(dest) else Path(dest).absolute()
    require_outside_input(source if is_remote(source) else Path(source).absolute(), local)
    if isinstance(local, Path):
        require_absent(local)
        return
    from keygroup_cli.storage import transfer
    from keygroup_cli.storage.locations import location

    # No commit file: the rescale would first delete a dead writer's uncommitted upload; a dry run
    # deletes nothing, so it refuses any object there.
    transfer.require_empty(location(local))
