"""Every command in docs/how-to/*.md and README.md runs as written, and prints what the page shows.

The conventions, for whoever writes a how-to:

- Code blocks tagged ``bash``, ``sh`` or ``console`` hold commands; blocks with any other tag (``text``,
  ``yaml``, ``python``, none) are illustrations and are not run.
- A page's blocks run in order in one bash process, in a new empty directory (the *work directory*) that
  holds the reader's files below: a later block sees the files and shell variables an earlier one left,
  as for a reader who types the page into one shell. Give each output its own name (``rescaled-p8/``,
  ``rescaled-m1024/``): kg never overwrites.
- A block is split into commands: a line with its backslash continuations and its here-document. A block
  whose first line is ``#!`` is a script and one command; its ``exit N`` ends it with N.
- Every command exits 0, unless its trailing comment starts with ``exit N`` (``# exit 1: ...``), or
  ``EXPECTED`` below names it, with why.
- A trailing comment that starts with ``->`` (``kg ranges --default-max-parallelism 24  # -> 128``) shows
  what the command prints: that text appears in its stdout or stderr (runs of spaces count as one, ``...``
  stands for anything).
- In a ``console`` block a line ``$ COMMAND`` is a command and the lines up to the next ``$`` line are its
  stdout, compared line by line (trailing spaces ignored; a line ``...`` stands for any number of lines).
- The reader's files (``READER_FILES``) are the placeholders the pages use for what a reader brings, laid
  out in the work directory before a page runs: ``savepoint/`` (a canonical Flink savepoint at
  parallelism 3, maxParallelism 128), ``checkpoints/`` (a job's checkpoint directory holding ``chk-2``, a
  HashMap checkpoint at parallelism 2), ``ha.yaml`` (an exported Kubernetes HA ConfigMap), ``keys.txt``
  and ``hot-keys.txt``. ``fixtures/`` is the checkout's, so a page may use a bundled fixture by its path
  from the checkout's root, and ``.venv/bin/kg`` and ``.venv/bin/python`` are the README's.
- ``kg`` is the script beside ``sys.executable``: a directory first on PATH holds a link to it (the decoy
  ``python3``/``python`` of the test session stay behind it); HOME and TMPDIR are inside the work
  directory (shell-completion appends to ``~/.bashrc``), ``KG_*`` variables are cleared but for
  ``KG_CACHE_DIR`` (kg's usual cache: Spark's class archive is written once per machine). Two pages run
  at a time (about 30 s of CPU in all; the Spark pages start six JVMs).
- A block that needs what no test machine has (an object store, a cluster, ZooKeeper, Kubernetes, the
  package index) is listed in ``NOT_RUNNABLE`` with why; the blocks not run are exactly that list, and a
  block naming such a thing (``EXTERNAL``) must be in it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, ROOT

KG = Path(sys.executable).parent / "kg"
PAGES = sorted((ROOT / "docs" / "how-to").glob("*.md")) + [ROOT / "README.md"]
LANGUAGES = ("bash", "sh", "console")

#: Placeholder in the work directory -> what the test puts there.
READER_FILES = {
    "savepoint": FIXTURES / "flink/2.3/heap-files-p3-maxp128-long",
    "checkpoints": FIXTURES / "flink/2.3/heap-checkpoint-p2-maxp128-string/0000000000006b670000000000000005",
    "ha.yaml": FIXTURES / "ha/2.3/kubernetes/configmap.yaml",
}
KEYS = "user-42\nuser-7\norder-1001\n"  # keys.txt and hot-keys.txt

HOW_TO = "docs/how-to/"
#: (page, start of the block's first command) -> why the block does not run here.
NOT_RUNNABLE = {
    ("README.md", "python3 -m venv .venv && .venv/bin/pip install"): "the package index",
    ("README.md", ".venv/bin/pip install -e '.[spark,native,test]' && .venv/bin/python -m pytest"): (
        "the package index, and the whole test suite, this test included (minutes)"
    ),
    ("README.md", "kg check s3://"): "an S3 bucket",
    (
        HOW_TO + "autoscaler-ceiling.md",
        "kubectl get flinkdeployment/ceiling-demo",
    ): "a Kubernetes cluster with the Flink operator",
    (
        HOW_TO + "autoscaler-ceiling.md",
        "kubectl patch flinkdeployment",
    ): "a Kubernetes cluster with the Flink operator",
    (
        HOW_TO + "generate-synthetic-snapshots.md",
        "kg generate big/",
    ): "300 MB of Parquet: the example is about size",
    (HOW_TO + "install.md", "python3 -m venv .venv"): "the package index (pip install)",
    (HOW_TO + "install.md", "python3 -m pip install build"): "the package index (build, pipx)",
    (
        HOW_TO + "install.md",
        ".venv/bin/pip install -e '.[ha]'",
    ): "the package index; it would change kg's venv",
    (HOW_TO + "install.md", 'pip install "$(ls dist/'): "a wheel in dist/ and the package index",
    (
        HOW_TO + "install.md",
        "PYSPARK_PYTHON=/opt/kg/bin/python",
    ): "another Python with kg installed, at /opt/kg",
    (
        HOW_TO + "rescale-a-savepoint.md",
        "flink savepoint --type canonical",
    ): "a running Flink job and an S3 bucket",
    (HOW_TO + "resume-from-ha-store.md", ".venv/bin/pip install -e '.[ha]'"): "the package index",
    (HOW_TO + "resume-from-ha-store.md", "kg inspect zk://"): "ZooKeeper",
    (HOW_TO + "resume-from-ha-store.md", "until kg rescale zk://"): "ZooKeeper",
    (HOW_TO + "resume-from-ha-store.md", "kubectl get cm"): "a Kubernetes cluster",
    (HOW_TO + "savepoints-in-object-stores.md", "export AWS_PROFILE="): "an S3 bucket",
    (
        HOW_TO + "savepoints-in-object-stores.md",
        "kg check s3://flink-prod/savepoints/savepoint-",
    ): "an S3 bucket",
    (HOW_TO + "savepoints-in-object-stores.md", "kg rescale s3://"): "an S3 bucket",
    (
        HOW_TO + "savepoints-in-object-stores.md",
        "kg check s3://flink-prod/savepoints/rescaled-p8",
    ): "an S3 bucket",
    (HOW_TO + "spark-cluster.md", "kg rescale s3://"): "a Spark cluster and an S3 bucket",
    (HOW_TO + "spark-cluster.md", "kg rescale SAVEPOINT"): "a Spark standalone cluster",
    (HOW_TO + "spark-cluster.md", "export HADOOP_CONF_DIR="): "a YARN cluster and HDFS",
    (HOW_TO + "spark-cluster.md", "python3 -m venv kg-env"): "the package index and a YARN cluster",
    (HOW_TO + "spark-cluster.md", "kg rescale gs://"): "a Kubernetes cluster and a GCS bucket",
    (HOW_TO + "spark-cluster.md", "printf 'import sys"): "spark-submit and a Spark standalone cluster",
}

#: What marks a block as needing something no test machine has (outside comments).
EXTERNAL = re.compile(
    r"s3://|s3a://|gs://|abfss?://|hdfs://|zk://|spark://|k8s://|--master|kubectl|spark-submit|^flink |"
    r"pip install|pipx |python3? -m build|venv-pack|/opt/kg",
    re.M,
)

#: (page, start of a command) -> (exit code, text its output holds, why), for a command whose page cannot
#: say so in a trailing comment without misleading a reader about their own savepoint.
EXPECTED = {
    (HOW_TO + "gate-a-deploy-in-ci.md", "#!/usr/bin/env sh"): (
        1,
        "restore would fail (see findings above)",
        "savepoint/ is not the example's job (other uids; maxParallelism 128, not 4096): the script's own "
        "mapping of kg's exit code runs",
    ),
    (HOW_TO + "gate-a-deploy-in-ci.md", 'kg check "$SAVEPOINT" -p "$PARALLELISM" --job-uids'): (
        1,
        "OPERATOR_NOT_IN_JOB",
        "savepoint/'s operators are not the example job's",
    ),
}

SPARK_PAGES = {"README.md", HOW_TO + "rescale-a-savepoint.md", HOW_TO + "rescale-a-snapshot.md"}


def _listed(table: dict, page: str, first_line: str) -> tuple | None:
    """The entry of ``table`` whose page is ``page`` and whose start begins ``first_line``, if any."""
    found = [key for key in table if key[0] == page and first_line.startswith(key[1])]
    assert len(found) <= 1, f"{page}: {first_line!r} matches {found}"
    return found[0] if found else None


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    language: str
    text: str

    @property
    def key(self) -> tuple[str, str]:
        """(page, first line that is not a comment): how NOT_RUNNABLE names the block."""
        first = next(row for row in self.text.splitlines() if row.strip() and not row.startswith("# "))
        return self.page, _head(first.removeprefix("$ "))


@dataclass(frozen=True)
class Command:
    block: Block
    text: str
    exit_code: int
    shows: str | None
    stdout: tuple[str, ...] | None
    why: str

    @property
    def key(self) -> tuple[str, str]:
        """(page, first line): how EXPECTED names the command."""
        return self.block.page, _head(self.text.splitlines()[0])


def blocks(page: Path) -> list[Block]:
    """Return the bash/sh/console blocks of ``page``."""
    found = []
    text = page.read_text()
    # A fence may be indented (a block inside a list item): its lines lose that indentation.
    for match in re.finditer(r"^( *)```(\w*)\n(.*?)^\1```\s*$", text, re.S | re.M):
        if match.group(2) in LANGUAGES:
            indent = " " * len(match.group(1))
            rows = [row.removeprefix(indent) for row in match.group(3).splitlines(True)]
            line = text.count("\n", 0, match.start()) + 1
            found.append(Block(page.relative_to(ROOT).as_posix(), line, match.group(2), "".join(rows)))
    return found


def _head(line: str) -> str:
    """A command's first line without its comment (a script's ``#!`` line as it is)."""
    return line if line.startswith("#!") else _strip_comment(line).rstrip()


def _comment_start(line: str) -> int | None:
    """Index of the ``#`` that starts a shell comment on ``line`` (outside quotes), or None."""
    quote = None
    for i, char in enumerate(line):
        if quote:
            if char == quote:
                quote = None
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return i
    return None


def _strip_comment(line: str) -> str:
    start = _comment_start(line)
    return line if start is None else line[:start]


def _comment(line: str) -> str:
    start = _comment_start(line)
    return "" if start is None else line[start + 1 :].strip()


def commands(block: Block) -> list[Command]:
    """Split ``block`` into its commands, each with what it must do."""
    lines = block.text.splitlines()
    if block.language == "console":
        found: list[tuple[str, list[str]]] = []
        for line in lines:
            if line.startswith("$ "):
                found.append((line[2:], []))
            elif found:
                found[-1][1].append(line)
        return [_command(block, text, tuple("\n".join(out).rstrip().splitlines())) for text, out in found]
    if lines[0].startswith("#!"):
        return [_command(block, block.text, None)]
    chunks = []
    i = 0
    while i < len(lines):
        if not lines[i].strip() or lines[i].lstrip().startswith("#"):
            i += 1
            continue
        chunk = [lines[i]]
        while chunk[-1].rstrip().endswith("\\") and i + 1 < len(lines):
            i += 1
            chunk.append(lines[i])
        heredoc = re.search(r"<<-?\s*'?(\w+)'?", chunk[-1])
        while heredoc and i + 1 < len(lines):
            i += 1
            chunk.append(lines[i])
            if lines[i].strip() == heredoc.group(1):
                break
        chunks.append("\n".join(chunk))
        i += 1
    return [_command(block, chunk, None) for chunk in chunks]


def _command(block: Block, text: str, stdout: tuple[str, ...] | None) -> Command:
    lines = text.splitlines()
    # The comment that says what a command does ends its last line (a script's comments are its own).
    ending = next((row for row in lines if not row.rstrip().endswith("\\")), lines[-1])
    comment = "" if lines[0].startswith("#!") else _comment(ending)
    exit_code, shows = 0, None
    if match := re.match(r"exit (\d+)\b", comment):
        exit_code = int(match.group(1))
        comment = comment[match.end() :].lstrip()
    if comment.startswith("->"):
        shows = comment[2:].strip()
    command = Command(block, text, exit_code, shows, stdout, "")
    listed = _listed(EXPECTED, *command.key)
    if listed:
        exit_code, shows, why = EXPECTED[listed]
        command = Command(block, text, exit_code, shows, stdout, why)
    return command


def _all_blocks() -> list[Block]:
    return [b for page in PAGES for b in blocks(page)]


def _runs(block: Block) -> bool:
    return _listed(NOT_RUNNABLE, *block.key) is None


def _runnable_pages() -> list[str]:
    return sorted({b.page for b in _all_blocks() if _runs(b)})


def test_the_blocks_not_run_are_exactly_the_listed_ones():
    every = _all_blocks()
    skipped = [_listed(NOT_RUNNABLE, *b.key) for b in every if not _runs(b)]
    # Each entry names exactly one block, and the blocks not run are exactly those.
    assert sorted(skipped) == sorted(NOT_RUNNABLE), (
        f"entries naming no block: {set(NOT_RUNNABLE) - set(skipped)}"
    )
    external = [
        f"{b.page}:{b.line}"
        for b in every
        if _runs(b) and EXTERNAL.search("\n".join(map(_strip_comment, b.text.splitlines())))
    ]
    assert not external, f"blocks that need an external service but are not in NOT_RUNNABLE: {external}"
    named = {_listed(EXPECTED, *c.key) for b in every for c in commands(b)}
    assert set(EXPECTED) <= named, f"EXPECTED names commands no page has: {set(EXPECTED) - named}"


def _params() -> list:
    return [
        pytest.param(page, id=page, marks=[pytest.mark.spark] if page in SPARK_PAGES else [])
        for page in _runnable_pages()
    ]


@pytest.fixture(scope="module")
def page_runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """Start the selected pages, two at a time (Spark's pages first), and map each to its future result.

    Each page runs in its own work directory; two pages at once keep the module within a minute on two
    cores, the JVM start-ups of Spark's pages overlapping the rest.
    """
    selected = [
        item.callspec.params["page"]
        for item in request.session.items
        if item.module is request.module and item.originalname == "test_page_runs_as_written"
    ]
    order = sorted(selected, key=lambda page: page not in SPARK_PAGES)
    # Spark's class-data-sharing archive is written once per machine (install.md): the usual cache.
    cache = os.environ.get("KG_CACHE_DIR") or str(
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kg"
    )
    with ThreadPoolExecutor(max_workers=2) as pool:
        yield {page: pool.submit(_run_page, page, tmp_path_factory.mktemp("page"), cache) for page in order}


@pytest.mark.parametrize("page", _params())
def test_page_runs_as_written(page: str, page_runs) -> None:
    failures = []
    for command, (code, stdout, stderr) in page_runs[page].result():
        problem = _judge(command, code, stdout, stderr)
        if problem:
            where = f"{page}:{command.block.line}: {command.text.splitlines()[0]}"
            failures.append(f"{where}\n  {problem}\n  stderr: {stderr[-1500:]}")
    assert not failures, "\n\n".join(failures)


def _lay_out_reader_files(work: Path) -> None:
    work.mkdir()
    for name, source in READER_FILES.items():
        if source.is_dir():
            shutil.copytree(source, work / name)
        else:
            shutil.copyfile(source, work / name)
    (work / "keys.txt").write_text(KEYS)
    (work / "hot-keys.txt").write_text(KEYS)
    (work / "fixtures").symlink_to(FIXTURES, target_is_directory=True)
    (work / ".venv" / "bin").mkdir(parents=True)
    (work / ".venv" / "bin" / "kg").symlink_to(KG)
    # The venv's Python, pyarrow and all (a link would lose the venv: Python finds it beside the path run).
    python = work / ".venv" / "bin" / "python"
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    (work / "home").mkdir()
    (work / "tmp").mkdir()


def _run_page(page: str, base: Path, cache: str) -> list[tuple[Command, tuple[int, str, str]]]:
    """Run the page's commands in order in one bash process; return each with its exit code and output."""
    run = [c for b in blocks(ROOT / page) if _runs(b) for c in commands(b)]
    work, results, bin_dir = base / "work", base / "results", base / "bin"
    _lay_out_reader_files(work)
    results.mkdir()
    bin_dir.mkdir()
    (bin_dir / "kg").symlink_to(KG)
    script = ["set -o pipefail"]
    for i, command in enumerate(run):
        # A script's `exit N` ends it (a function here, so its variables stay for the page's later blocks).
        text = re.sub(r"\bexit\b", "return", command.text) if command.text.startswith("#!") else command.text
        script += [
            f"__kg_doc_{i}() {{",
            text,
            "}",
            f"__kg_doc_{i} > {results}/{i}.out 2> {results}/{i}.err < /dev/null",
            f"echo $? > {results}/{i}.rc",
        ]
    keep = ("KG_TEST_DECOY_PATH",)
    env = {
        k: v for k, v in os.environ.items() if k in keep or not k.startswith(("KG_", "PYSPARK_", "COLUMNS"))
    }
    env.update(
        PATH=os.pathsep.join([str(bin_dir), os.environ.get("PATH", "")]),
        HOME=str(work / "home"),
        TMPDIR=str(work / "tmp"),
        KG_CACHE_DIR=cache,
        NO_COLOR="1",
    )
    bash = shutil.which("bash") or "/bin/bash"
    subprocess.run([bash, "-c", "\n".join(script)], cwd=work, env=env, timeout=600, check=False)
    done = []
    for i, command in enumerate(run):
        rc = results / f"{i}.rc"
        code = int(rc.read_text()) if rc.exists() else -1
        out = (results / f"{i}.out").read_text(errors="replace") if code != -1 else ""
        err = (results / f"{i}.err").read_text(errors="replace") if code != -1 else "(never ran)"
        done.append((command, (code, out, err)))
    return done


def _judge(command: Command, code: int, stdout: str, stderr: str) -> str | None:
    if code != command.exit_code:
        why = f" ({command.why})" if command.why else ""
        return f"exit {code}, the page says {command.exit_code}{why}"
    if command.shows is not None and not _shows(command.shows, stdout + "\n" + stderr):
        return f"does not print {command.shows!r}; stdout: {stdout[-1500:]}"
    if command.stdout is not None and not _lines_match(
        list(command.stdout), [line.rstrip() for line in stdout.splitlines()]
    ):
        return "prints other lines than the page shows:\n" + stdout
    return None


def _shows(expected: str, output: str) -> bool:
    flat = " ".join(output.split())
    pattern = ".*?".join(re.escape(" ".join(part.split())) for part in expected.split("..."))
    return re.search(pattern, flat, re.S) is not None


def _lines_match(expected: list[str], actual: list[str]) -> bool:
    """Whether ``actual`` is ``expected`` line by line, a line ``...`` standing for any number of lines."""
    if not expected:
        return not actual
    head = expected[0].rstrip()
    if head == "...":
        return any(_lines_match(expected[1:], actual[i:]) for i in range(len(actual) + 1))
    return bool(actual) and actual[0] == head and _lines_match(expected[1:], actual[1:])


def test_the_matching_rules():
    assert _lines_match(["a", "...", "d"], ["a", "b", "c", "d"])
    assert _lines_match(["...", "c", "..."], ["a", "b", "c", "d"])
    assert not _lines_match(["a", "c"], ["a", "b", "c"])
    assert _shows(
        "OK: snap: 6 files, ... rows checked", "OK: snap:  6 files, 6446 rows checked, 0 finding(s)"
    )
    assert _comment_start("kg key --keys-file k.txt  # -> 20") == 26
    assert _comment_start("conf spark.archives=kg-env.tar.gz#env") is None
    assert _comment_start("echo '# not a comment'") is None


def test_usage_errors_print_what_exit_codes_md_shows(tmp_path: Path) -> None:
    """docs/reference/exit-codes.md: click's usage lines, except under --json (one line and a document)."""
    page = (ROOT / "docs" / "reference" / "exit-codes.md").read_text()
    shown = re.search(r"```text\n(Usage: kg ranges .*?)```", page, re.S)
    assert shown, "exit-codes.md no longer shows the usage error"
    env = {k: v for k, v in os.environ.items() if not k.startswith("KG_")}
    plain = subprocess.run(
        [str(KG), "ranges", "--bogus"], capture_output=True, text=True, env=env, check=False
    )
    assert (plain.returncode, plain.stdout, plain.stderr) == (2, "", shown.group(1))
    for args, extra in ((["ranges", "--bogus", "--json"], {}), (["ranges", "--bogus"], {"KG_JSON": "1"})):
        done = subprocess.run(
            [str(KG), *args], capture_output=True, text=True, env={**env, **extra}, check=False
        )
        assert done.returncode == 2 and done.stderr == "kg: error: No such option '--bogus'.\n"
        assert json.loads(done.stdout)["error"]["code"] == "USAGE"
    bare = subprocess.run([str(KG)], capture_output=True, text=True, env=env, check=False)
    assert (
        bare.returncode == 2 and bare.stdout == "" and bare.stderr.startswith("Usage: kg [OPTIONS] COMMAND")
    )
    nothing = subprocess.run([str(KG), "--json"], capture_output=True, text=True, env=env, check=False)
    assert json.loads(nothing.stdout)["command"] is None and nothing.stderr.count("\n") == 1
