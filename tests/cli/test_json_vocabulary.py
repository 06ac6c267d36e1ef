"""JSON schema 3: every command's ``--json`` uses only the names of one glossary, the one the docs print.

The glossary is parsed from ``docs/reference/json-output.md`` (its "Glossary" table), so the docs and the
documents cannot drift apart: a field a command emits that the table does not list fails here, and so does
a renamed field whose old name a command still emits. Each document is also checked for
``schema_version`` 3 and for its input and output paths being exactly what was typed. The text outputs
count operators and name an operator without a uid the same way in every command.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
GLOSSARY_DOC = ROOT / "docs" / "reference" / "json-output.md"

#: Typed relative to the test's working directory, where ``fixtures`` links to the repository's.
SAVEPOINT = "fixtures/flink/2.3/heap-files-p3-maxp128-long"
SNAPSHOT = "fixtures/snapshots/valid"
KAFKA = "fixtures/flink/2.0/kafka-p2"
HA_CONFIGMAP = "fixtures/ha/2.3/kubernetes/configmap.yaml"
DEPLOYMENT = "fixtures/k8s/autoscaler-ceiling/deployment.yaml"
CHECKPOINTS = "fixtures/flink/2.3/heap-checkpoint-p2-maxp128-string/0000000000006b670000000000000005"

#: Values that are data, not fields: a key, a state's value, a map's user key, a namespace, a parsed HA entry.
DATA = {
    *("key", "value", "user_key", "namespace", "parsed", "environment"),
    *("vertex_overrides", "merge_patch", "state_snapshot"),  # Kubernetes resources and their fields
}

#: Names of schema 2 that schema 3 renamed: the glossary may not list them, so no document can carry them.
RENAMED = {
    "format",
    "snapshot",
    "snapshot_id",
    "destination",
    "out",
    "dest",
    "a",
    "b",
    "holds_state",
    "keyed_bytes",
    "stored_bytes",
    "total_bytes",
    "checked_operators",
}


#: Glossary names of documents this test does not produce: a live HA leader's, ``kg doctor --spark``'s
#: (starts Spark), an entry ``kg get`` cannot decode, ``kg clean``'s leftovers of a killed run, and an
#: unavailable ``key_group_sizes`` (a NATIVE savepoint among canonical ones).
NOT_RUN = {
    "address",
    "session_id",
    "zk_session",
    "master",
    "seconds",
    "note",
    "method",  # kg gc --delete: how liveness was judged
    "live",
    "writer",
    "writer_gone",
    "removed",
    "unavailable_code",
    "unavailable_reason",
}


def glossary() -> set[str]:
    """Return every field name the "Glossary" table of json-output.md lists."""
    text = GLOSSARY_DOC.read_text(encoding="utf-8")
    section = text.split("\n## Glossary\n", 1)[1].split("\n## ", 1)[0]
    names: set[str] = set()
    for line in section.splitlines():
        if not line.startswith("| `"):
            continue
        first_cell = line.split("|")[1]
        names.update(re.findall(r"`([a-z_0-9]+)`", first_cell))
    return names


def fields(document: Any, where: str = "") -> Iterator[tuple[str, str]]:
    """Yield ``(path, name)`` for every key of ``document``, recursively, except inside data values.

    ``kg get``'s ``keys[].states`` is keyed by state name: its keys are names of states, its values fields.
    """
    if isinstance(document, list):
        for item in document:
            yield from fields(item, where + "[]")
        return
    if not isinstance(document, dict):
        return
    for name, value in document.items():
        path = f"{where}.{name}"
        if where.endswith("keys[].states"):
            yield from fields(value, path)  # a state's name: data
            continue
        yield path, name
        if name not in DATA:
            yield from fields(value, path)


@pytest.fixture
def typed_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Work in ``tmp_path``, where ``fixtures`` links to the bundled fixtures: paths are typed relative."""
    (tmp_path / "fixtures").symlink_to(ROOT / "fixtures")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _commands(tmp: Path) -> list[tuple[list[str], dict[str, str]]]:
    """Return every command's ``--json`` run, with the paths its document must echo as typed."""
    (tmp / "job-uids.txt").write_text("keyed-state\n", encoding="utf-8")
    shutil.copytree(ROOT / CHECKPOINTS, tmp / "job")
    (tmp / "job" / "shared").mkdir()
    (tmp / "job" / "shared" / "leaked-sst").write_bytes(b"x" * 100)  # an orphan, just written: held
    return [
        (["ranges", "-m", "128", "-p", "3"], {}),
        (["ranges", "--default-max-parallelism", "3"], {}),
        (["key", "hello", "42", "-m", "128", "-p", "3"], {}),
        (["plan", "--from", "3", "--to", "4", "-m", "128"], {}),
        (["plan", SAVEPOINT, "--to", "4"], {"input": SAVEPOINT}),
        (["plan", SNAPSHOT + "/", "--to", "4"], {"input": SNAPSHOT + "/"}),
        (["advise", "-m", "128", "--min", "90", "--max", "128"], {}),
        (["inspect", SAVEPOINT + "/_metadata", "--key-groups"], {"input": SAVEPOINT + "/_metadata"}),
        (["inspect", SNAPSHOT], {"input": SNAPSHOT}),
        (
            ["inspect", KAFKA, "--kafka-source", "kafka-source", "--kafka-sink", "kafka-sink"],
            {"input": KAFKA},
        ),
        (["inspect", HA_CONFIGMAP], {"input": HA_CONFIGMAP}),
        (["check", SAVEPOINT, "-p", "4"], {"input": SAVEPOINT}),
        (["check", SAVEPOINT, "--job-uids", "job-uids.txt"], {"input": SAVEPOINT}),
        (["verify", SNAPSHOT], {"input": SNAPSHOT}),
        (["get", SAVEPOINT, "-o", "keyed-state", "-k", "0", "-k", "1"], {"input": SAVEPOINT}),
        (
            ["export", SAVEPOINT, "-o", "keyed-state", "--out", "exported"],
            {"input": SAVEPOINT, "output": "exported"},
        ),
        (["diff", SNAPSHOT, "generated"], {"input_a": SNAPSHOT, "input_b": "generated"}),
        (
            ["rescale", SAVEPOINT, "--to", "4", "--out", "planned/", "--dry-run"],
            {"input": SAVEPOINT},
        ),
        (
            ["rescale", SAVEPOINT, "--to", "4", "--out", "rescaled/", "--engine", "local"],
            {"input": SAVEPOINT, "output": "rescaled/"},
        ),
        (
            ["rescale", SNAPSHOT, "--to", "4", "--out", "./rescaled-kg", "--engine", "local"],
            {"input": SNAPSHOT, "output": "./rescaled-kg"},
        ),
        (
            ["migrate", SAVEPOINT, "--out", "renamed", "--rename", "keyed-state=ks2", "--dry-run"],
            {"input": SAVEPOINT, "output": "renamed"},
        ),
        (
            ["migrate", SAVEPOINT, "--out", "renamed", "--rename", "keyed-state=ks2"],
            {"input": SAVEPOINT, "output": "renamed"},
        ),
        (["convert", SAVEPOINT, "--out", "state.kg"], {"input": SAVEPOINT, "output": "state.kg"}),
        (["convert", "state.kg", "--to-flink", "--out", "back/"], {"input": "state.kg", "output": "back/"}),
        (["clean", "rescaled/"], {"output": "rescaled/"}),
        (["doctor"], {}),
        (["inspect", "no-such-savepoint"], {}),
        (["inspect", DEPLOYMENT], {"input": DEPLOYMENT}),
        (["check", DEPLOYMENT], {"input": DEPLOYMENT}),
        (["plan", DEPLOYMENT], {}),
        (["gc", "job"], {"input": "job"}),
        (["export", SAVEPOINT, "-o", "keyed-state", "--state", "sum", "--out", "sum.parquet"], {}),
        (
            [*("write", SAVEPOINT, "-o", "keyed-state", "-s", "sum", "--mode", "upsert")]
            + ["--data", "sum.parquet", "--out", "written/"],
            {"input": SAVEPOINT, "output": "written/"},
        ),
        (["compact", SAVEPOINT, "--drop-where", "key < 10", "--out", "compacted/"], {"output": "compacted/"}),
        (["rescale", DEPLOYMENT, "-m", "600", "--from", "3", "--out", "m600/"], {"output": "m600/"}),
    ]


def test_every_document_uses_only_the_glossary(typed_here: Path, kg: Callable[..., Any]) -> None:
    """Every field of every command's JSON is in the glossary; schema 3; paths echoed as typed."""
    names = glossary()
    assert not names & RENAMED, f"the glossary still lists schema 2 names: {sorted(names & RENAMED)}"
    generated = kg("generate", "generated", "-o", "counter:string:30:2:16", "--json")
    seen: dict[str, set[str]] = {"generate": set()}
    documents = [(["generate"], generated.json(), {"output": "generated"})]
    for args, typed in _commands(typed_here):
        result = kg(*args, "--json")
        documents.append((args, result.json(), typed))  # exactly one document on stdout
    unknown = []
    for args, document, typed in documents:
        assert document["schema_version"] == 3, args
        assert document["command"] in (args[0], "plan"), args
        for name, value in typed.items():
            assert document.get(name) == value, (args, name, document)
        for path, name in fields(document):
            seen.setdefault(args[0], set()).add(name)
            if name not in names:
                unknown.append(f"kg {' '.join(args)}: {path}")
    assert not unknown, "fields missing from docs/reference/json-output.md's glossary:\n" + "\n".join(unknown)
    # And the glossary lists no name that no document has: only those of the runs this test cannot make.
    unused = names - set().union(*seen.values())
    assert unused == NOT_RUN, sorted(unused ^ NOT_RUN)
    # The documents this test ran exercise what they are meant to (a check that would pass vacuously fails).
    assert {"operators_with_state", "key_group_bytes", "keyed_file_bytes", "has_state"} <= set().union(
        *seen.values()
    )
    assert {"error", "code", "message"} <= seen["inspect"]


def test_operator_is_one_shape(typed_here: Path, kg: Callable[..., Any]) -> None:
    """``operator`` is ``{uid, name, operator_id}`` in kg get, kg export and the Kafka connector documents."""
    shape = {"uid", "name", "operator_id"}
    got = kg("get", SAVEPOINT, "-o", "keyed-state", "-k", "1", "--json").json()
    exported = kg(
        "export", SAVEPOINT, "-o", "9887c2fb29a6e66df7039a0be00a90dd", "--out", "e", "--json"
    ).json()
    kafka = kg("inspect", KAFKA, "--kafka-source", "kafka-source", "--json").json()
    assert set(got["operator"]) == shape
    assert got["operator"]["uid"] == "keyed-state"
    assert exported["operator"] == {
        "uid": None,
        "name": "count-no-uid",
        "operator_id": "9887c2fb29a6e66df7039a0be00a90dd",
    }
    assert set(kafka["kafka_sources"][0]["operator"]) == shape
    for document in (got, kafka):
        for entry in document.get("operators", []):
            assert list(entry)[:3] == ["uid", "name", "operator_id"]


def test_operators_are_counted_one_way(typed_here: Path, kg: Callable[..., Any]) -> None:
    """The README's first run: inspect, rescale and check count "10 operators, 5 with state" alike.

    The source's operator state holds no element, yet it has state: rescale counted operators with rows
    (4) before schema 3, inspect and check operators with a state handle (5).
    """
    inspected = kg("inspect", SAVEPOINT).stdout
    rescaled = kg(
        "rescale", SAVEPOINT, "--from", "3", "--to", "4", "-m", "1024", "--out", "r", "--engine", "local"
    )
    checked = kg("check", "r", "--parallelism", "4", "--max-parallelism", "1024")
    planned = kg("plan", SAVEPOINT, "--from", "3", "--to", "4").stdout
    migrated = kg("migrate", SAVEPOINT, "--out", "m", "--rename", "keyed-state=ks2", "--dry-run").stdout
    for text in (inspected, rescaled.stdout, checked.stdout, planned, migrated):
        assert "10 operators, 5 with state" in text, text
    document = kg("check", "r", "-p", "4", "-m", "1024", "--json").json()
    assert (document["operators"], document["operators_with_state"]) == (10, 5)
    rescale_json = kg("rescale", SAVEPOINT, "--to", "4", "--out", "r2", "--engine", "local", "--json").json()
    assert sum(op["has_state"] for op in rescale_json["operators"]) == 5


def test_an_operator_without_uid_is_shown_by_its_name_everywhere(
    typed_here: Path, kg: Callable[..., Any]
) -> None:
    """count-no-uid has no uid: inspect, plan, rescale, check and get all show it by its name, not its id."""
    op_id = "9887c2fb29a6e66df7039a0be00a90dd"
    inspected = kg("inspect", SAVEPOINT).stdout
    planned = kg("plan", SAVEPOINT, "--from", "3", "--to", "4").stdout
    rescaled = kg("rescale", SAVEPOINT, "--from", "3", "--to", "4", "--out", "r", "--engine", "local").stdout
    checked = kg("check", SAVEPOINT, "-p", "200", "--table", "tsv").stdout
    got = kg("get", SAVEPOINT, "-o", op_id, "-k", "1").stdout
    for text in (inspected, planned, rescaled, checked, got):
        assert "count-no-uid" in text, text
    assert f"│ {op_id}" not in rescaled  # not the id in the operator column
    subjects = {f["subject"] for f in kg("check", SAVEPOINT, "-p", "200", "--json").json()["findings"]}
    assert "count-no-uid" in subjects and op_id not in subjects
