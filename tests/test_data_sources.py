"""Where each math set comes from (`MathSetSpec.hub` / `.local` / `.generator`) and how `load_math_dataset`
dispatches on it; gold readers that return `str | None` and refuse containers. Offline: small files in tmp_path,
the public benchmark files in ../shared/data where present."""

from __future__ import annotations

import ast
import dataclasses
import json
from pathlib import Path

import datasets
import pytest

from ordergrad_trl.tasks import data as data_mod
from ordergrad_trl.tasks.arithmetic import arithmetic_dataset, digits_dataset
from ordergrad_trl.tasks.data import load_math_dataset, shared_data_dir
from ordergrad_trl.tasks import sets
from ordergrad_trl.tasks.sets import (
    GENERIC_SPEC,
    MATH_SETS,
    Generated,
    HubSource,
    LocalFile,
    MathSetSpec,
    find_math_set,
    get_math_set,
    spec_for_file,
)

PACKAGE = Path(__file__).resolve().parents[1] / "ordergrad_trl"
DATA = shared_data_dir()
ROW = {"problem": "Compute 2+3.", "question": "Compute 2+3.", "answer": "5", "id": "r0", "idx": 0,
       "unique_id": "u0"}


def row_of(name: str) -> dict:
    """A valid raw row for set `name`: the set's own example (its spec knows its fields; the gold reads as 5)."""
    return dict(MATH_SETS[name].example)


def mine(**sources) -> MathSetSpec:
    return MathSetSpec(name="mine", question=GENERIC_SPEC.question, gold=GENERIC_SPEC.gold, **sources)


def test_every_set_names_its_source():
    for spec in MATH_SETS.values():
        assert (spec.generator is not None) != bool(spec.hub or spec.local), spec.name
        if spec.generator is None:  # its example row is what the fixtures are built from
            assert spec.question(spec.example) and spec.gold(spec.example) == "5", spec.name
            assert spec.solution is None or spec.solution(spec.example), spec.name
        assert spec.sources and all(isinstance(s, (HubSource, LocalFile, Generated)) for s in spec.sources)
    assert {n for n, s in MATH_SETS.items() if s.generator} == {"arithmetic", "digits", "digits20", "chains"}
    with pytest.raises(ValueError, match="'x': a generated set has no Hub id or local file"):
        MathSetSpec(name="x", question=GENERIC_SPEC.question, gold=GENERIC_SPEC.gold, hub=HubSource("a/b"),
                    generator=MATH_SETS["digits"].generator)


def test_a_registered_set_is_found_by_its_names_and_a_taken_one_is_refused():
    """`MATH_SETS` is a `Registry`: a set lent to it is found by name, alias or Hub id (any case, `-`/`_` ignored) and
    read from its file; a name, alias or Hub id another set is found by is refused, naming both."""
    spec = mine(hub=HubSource("me/My-Set"), local=LocalFile("my_set.jsonl", "test"), aliases=("my-set",))
    with sets._ROWS.registered("mine", spec):
        assert find_math_set("MY_SET") is spec and find_math_set("me/my-set") is spec and get_math_set("mine") is spec
        assert spec_for_file("my_set.jsonl") is spec
    assert find_math_set("mine") is None and spec_for_file("my_set.jsonl") is GENERIC_SPEC
    with pytest.raises(ValueError, match="unknown math set 'mine'; valid names: math, math500, "):
        get_math_set("mine")
    with pytest.raises(ValueError, match="math set name 'MATH-500' of 'mine' is taken by 'math500'"):
        sets._register(mine(hub=HubSource("me/My-Set"), aliases=("MATH-500",)))
    with pytest.raises(ValueError, match="math set name 'math' is already registered by the set 'MATH .+; the set "
                                         "'me/My-Set' needs another name"):
        sets._register(dataclasses.replace(spec, name="math"))
    assert "mine" not in MATH_SETS


@pytest.mark.parametrize("name", [n for n, s in MATH_SETS.items() if s.hub])
def test_hub_sets_load_their_id_config_and_split(monkeypatch, name):
    calls = []

    def fake_hub(path, config=None, split=None):
        calls.append((path, config, split))
        return datasets.Dataset.from_list([row_of(name)])

    monkeypatch.setattr(data_mod.datasets, "load_dataset", fake_hub)
    monkeypatch.delenv("ORDERGRAD_LOCAL_DATA", raising=False)
    hub = MATH_SETS[name].hub
    ds = load_math_dataset(name, split="test", local=False)
    assert calls == [(hub.id, hub.config, hub.splits.get("test", "test"))] and ds["answer"] == ["5"]
    want = {"aime24": ("HuggingFaceH4/aime_2024", None, "train"),  # its test problems are the Hub's train split
            "olympiadbench": ("Hothan/OlympiadBench", "OE_TO_maths_en_COMP", "train"),
            "gsm8k": ("openai/gsm8k", "main", "test")}
    assert calls[0] == want.get(name, calls[0])


@pytest.mark.parametrize("name", [n for n, s in MATH_SETS.items() if s.local])
def test_local_sets_read_their_file(tmp_path, monkeypatch, name):
    real = datasets.load_dataset
    monkeypatch.setattr(data_mod.datasets, "load_dataset",  # the Hub must not be asked
                        lambda path, *a, **kw: real(path, *a, **kw) if path == "json" else pytest.fail(path))
    spec = MATH_SETS[name]
    (tmp_path / spec.local.name).write_text(json.dumps(row_of(name)) + "\n")
    assert load_math_dataset(name, local=True, data_dir=tmp_path)["answer"] == ["5"]
    monkeypatch.setenv("ORDERGRAD_LOCAL_DATA", "1")
    assert load_math_dataset(name, data_dir=tmp_path)["answer"] == ["5"]


@pytest.mark.parametrize(("name", "build"), [("arithmetic", arithmetic_dataset), ("digits", digits_dataset)])
def test_generated_sets_come_from_their_generator(name, build):
    for split in ("train", "test"):
        assert load_math_dataset(name, split=split).to_list() == build()[split].to_list()
    assert load_math_dataset(name, local=True, split="test").to_list() == build()["test"].to_list()
    with pytest.raises(ValueError, match=f"split for '{name}' must be 'train' or 'test', got 'validation'"):
        load_math_dataset(name, split="validation")


def test_a_set_without_hub_id_reads_its_local_file_or_says_what_to_pass(tmp_path):
    (tmp_path / "mine_test.jsonl").write_text(json.dumps(ROW) + "\n")
    spec = mine(local=LocalFile("mine_test.jsonl"))
    assert load_math_dataset(spec, data_dir=tmp_path)["answer"] == ["5"]  # its only source: no flag needed
    with pytest.raises(ValueError) as info:
        load_math_dataset(spec, local=False, data_dir=tmp_path)
    msg = str(info.value)
    assert "'mine' has no Hub id" in msg and "mine_test.jsonl" in msg and "--local_data" in msg and "\n" not in msg
    with pytest.raises(ValueError) as info:
        load_math_dataset(mine())
    msg = str(info.value)
    assert "'mine' has no Hub id and no local file" in msg and "--datasets /path/to/file.jsonl" in msg
    assert "\n" not in msg
    with pytest.raises(ValueError, match="'mine' has no local file; load it from the Hub \\(a/b\\)"):
        load_math_dataset(mine(hub=HubSource("a/b")), local=True)


def test_unregistered_hub_id_is_read_with_the_given_spec(monkeypatch):
    calls = []
    monkeypatch.setattr(data_mod.datasets, "load_dataset", lambda path, config=None, split=None: calls.append(
        (path, config, split)) or datasets.Dataset.from_list([{"question": "q", "answer": "#### 7"}]))
    ds = load_math_dataset("someone/grade-school", split="test", spec="gsm8k", local=False)
    assert calls == [("someone/grade-school", None, "test")]
    assert ds["answer"] == ["7"] and ds["id"] == ["gsm8k-test-0"]


# ------------------------------------------------------------------------------------------------ gold readers
BAD = [["25"], {"value": "25"}, True, ("25",)]


@pytest.mark.parametrize("name", [n for n, s in MATH_SETS.items() if not s.generator])
@pytest.mark.parametrize("bad", BAD, ids=lambda b: type(b).__name__)
def test_gold_readers_refuse_containers(name, bad):
    gold = MATH_SETS[name].gold
    example = MATH_SETS[name].example
    # every field of the set's own row made a container (a list field: a list holding one): the gold must refuse it
    row = {k: [bad] if isinstance(v, list) else bad for k, v in example.items()}
    with pytest.raises(ValueError, match="not a string"):
        gold(row)
    assert gold(example) == "5"
    assert gold({"problem": "no gold"}) is None


def test_gsm8k_gold_parser_refuses_a_list():
    from ordergrad_trl.tasks.sets import gsm8k_gold

    assert gsm8k_gold("3 + 2\n#### 1,005") == "1005"
    with pytest.raises(ValueError, match="is a list"):
        gsm8k_gold(["#### 5"])


def test_a_list_gold_in_a_file_is_refused_with_its_row(tmp_path):
    path = tmp_path / "lists.jsonl"
    path.write_text("".join(json.dumps({"problem": f"p{i}", "answer": [str(i)], "id": f"q{i}"}) + "\n"
                            for i in range(3)))
    for spec in (None, "amc23", "aime24"):
        with pytest.raises(ValueError, match=r"row 0 \(id 'q0'\): the gold answer is a list \(\['0'\]\)"):
            load_math_dataset(path, spec=spec)
    with pytest.raises(ValueError, match="row 0.*the gold reader returned a list"):  # a caller's own reader
        load_math_dataset(path, spec=MathSetSpec(name="own", question=GENERIC_SPEC.question,
                                                 gold=lambda row: row["answer"], id_field="id"))


def test_shared_benchmark_golds_are_plain_strings():
    present = [s for s in MATH_SETS.values() if s.local and (DATA / s.local.name).is_file()]
    if not present:
        pytest.skip(f"public benchmark files not found in {DATA} (set ORDERGRAD_SHARED_DATA)")
    for spec in present:
        golds = load_math_dataset(spec.name, local=True, drop_unanswerable=spec.name == "minerva")["answer"]
        assert golds and all(isinstance(g, str) and g and not g.startswith(("['", '["', "{'")) for g in golds), \
            spec.name


def test_tasks_modules_import_no_private_names_of_each_other():
    for path in (PACKAGE / "tasks").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("ordergrad_trl")):
                private = [a.name for a in node.names if a.name.startswith("_")]
                assert not private, f"{path.name} imports {private} from {node.module}"
