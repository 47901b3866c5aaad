"""Trace (JSON Lines) and cluster (YAML) loading: errors name file, line and field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rollmux.core.spec import JobSpec, default_cluster
from rollmux.core.trace_io import (
    dump_jobs,
    load_cluster,
    load_jobs,
    parse_cluster,
    parse_job_file,
    parse_jobs,
    unknown_fields,
)
from rollmux.errors import InputError
from factories import job_record, make_job

CLUSTER_YAML = """\
# comment line
pools:
  rollout: {gpu: H20,  gpus_per_node: 8, host_gb_per_node: 2048, price_per_gpu_hour: 1.00, max_nodes: null}
  train:   {gpu: H800, gpus_per_node: 8, host_gb_per_node: 2048, price_per_gpu_hour: 2.85, max_nodes: 4}
warm_switch_s: 2.0
cold_switch_s: 135.0
"""

BLOCK_YAML = """\
pools:
  rollout:
    gpu: H20
    price_per_gpu_hour: 1.0
  train:
    gpu: H800
    price_per_gpu_hour: 2.85
warm_switch_s: 2.0
"""


def lines(*records) -> list[str]:
    return [r if isinstance(r, str) else json.dumps(r) for r in records]


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


# -- trace: errors -------------------------------------------------------------------------

def test_bad_json_names_file_and_line():
    with pytest.raises(InputError) as exc:
        parse_jobs(lines(job_record("a"), '{"job_id": "b",'), "t.jsonl")
    assert exc.value.place == "t.jsonl:2"
    assert "JSON" in exc.value.reason


def test_missing_field_names_line_and_field():
    rec = job_record("b")
    del rec["train_s"]
    with pytest.raises(InputError) as exc:
        parse_jobs(lines(job_record("a"), rec), "t.jsonl")
    assert exc.value.place == "t.jsonl:2: field 'train_s'"
    assert "required" in exc.value.reason.lower()


def test_missing_nested_field_names_dotted_field():
    with pytest.raises(InputError) as exc:
        parse_jobs(lines(job_record("a", rollout_s={"median": 10.0, "sigma": 0.1})), "t.jsonl")
    assert exc.value.place == "t.jsonl:1: field 'rollout_s.max'"


def test_invalid_value_names_line_field_and_value():
    with pytest.raises(InputError) as exc:
        parse_jobs(lines(job_record("a"), job_record("b"), job_record("c", slo=0.5)), "t.jsonl")
    assert exc.value.place == "t.jsonl:3: field 'slo'"
    assert "0.5" in exc.value.reason


def test_invalid_nested_value_names_dotted_field():
    with pytest.raises(InputError) as exc:
        parse_jobs(lines(job_record("a", host_gb={"rollout": -1, "train": 10})), "t.jsonl")
    assert exc.value.place == "t.jsonl:1: field 'host_gb.rollout'"


def test_an_unknown_mode_a_job_cannot_take_names_line_field_and_choices():
    with pytest.raises(InputError) as exc:
        parse_jobs(lines(job_record("a"), job_record("b", cannot=["colocate", "bogus"])), "t.jsonl")
    assert exc.value.place == "t.jsonl:2: field 'cannot'"
    assert "unknown mode 'bogus'" in exc.value.reason and "tail_migration" in exc.value.reason


def test_max_below_median_names_rollout_field():
    with pytest.raises(InputError) as exc:
        parse_jobs(lines(job_record("a", rollout_s={"median": 10, "sigma": 0.1, "max": 5})), "t.jsonl")
    assert exc.value.place == "t.jsonl:1: field 'rollout_s'"
    assert "max" in exc.value.reason


def test_infinite_duration_is_an_input_error_naming_the_field():
    # 1e999 parses to inf in Python's json; it must not reach the scheduler.
    text = json.dumps(job_record("a")).replace('"duration_s": 3600.0', '"duration_s": 1e999')
    with pytest.raises(InputError) as exc:
        parse_jobs([text], "t.jsonl")
    assert exc.value.place == "t.jsonl:1: field 'duration_s'"


def test_duplicate_job_id_names_both_lines():
    with pytest.raises(InputError) as exc:
        parse_jobs(lines(job_record("a"), job_record("b"), job_record("a")), "t.jsonl")
    assert exc.value.place == "t.jsonl:3: field 'job_id'"
    assert "line 1" in exc.value.reason


def test_non_object_line_is_an_error():
    with pytest.raises(InputError) as exc:
        parse_jobs(lines(job_record("a"), "[1, 2, 3]"), "t.jsonl")
    assert exc.value.place == "t.jsonl:2"
    assert "object" in exc.value.reason


def test_empty_trace_is_an_error():
    with pytest.raises(InputError) as exc:
        parse_jobs(["", "# only a comment", "   "], "t.jsonl")
    assert exc.value.place == "t.jsonl"


def test_input_error_message_joins_place_and_reason():
    err = InputError("t.jsonl:3: field 'slo'", "too small")
    assert str(err) == "t.jsonl:3: field 'slo': too small"


# -- trace: unknown fields and ordering ------------------------------------------------------

def test_unknown_top_level_field_is_an_error_naming_line_and_field():
    with pytest.raises(InputError) as exc:
        parse_jobs(lines(job_record("a"), job_record("b", colour="red")), "t.jsonl")
    assert str(exc.value) == "t.jsonl:2: field 'colour': unknown field"


def test_unknown_nested_field_is_an_error_with_its_dotted_name():
    rec = job_record("a", rollout_s={"median": 10, "sigma": 0.1, "max": 20, "p99": 18})
    with pytest.raises(InputError) as exc:
        parse_jobs(lines(rec), "t.jsonl")
    assert exc.value.place == "t.jsonl:1: field 'rollout_s.p99'"


def test_blank_and_comment_lines_are_skipped_but_counted():
    trace = parse_jobs(["# header", "", json.dumps(job_record("a")), "   ",
                        json.dumps(job_record("b"))], "t.jsonl")
    assert [j.job_id for j in trace.jobs] == ["a", "b"]
    with pytest.raises(InputError) as exc:
        parse_jobs(["# header", "", json.dumps(job_record("a")), "   ",
                    json.dumps(job_record("b", colour=1))], "t.jsonl")
    assert exc.value.place == "t.jsonl:5: field 'colour'"


def test_jobs_are_sorted_by_arrival():
    trace = parse_jobs(lines(job_record("late", arrival_s=50.0), job_record("early", arrival_s=10.0),
                             job_record("mid", arrival_s=20.0)), "t.jsonl")
    assert [j.job_id for j in trace.jobs] == ["early", "mid", "late"]


def test_arrival_ties_keep_file_order():
    trace = parse_jobs(lines(job_record("x", arrival_s=5.0), job_record("a", arrival_s=5.0),
                             job_record("m", arrival_s=1.0)), "t.jsonl")
    assert [j.job_id for j in trace.jobs] == ["m", "x", "a"]


def test_unknown_fields_lists_top_level_and_nested_extras():
    job = JobSpec.model_validate(job_record(
        "a", colour="red", host_gb={"rollout": 1.0, "train": 2.0, "numa": 0}))
    assert sorted(unknown_fields(job)) == ["colour", "host_gb.numa"]


# -- trace: files ----------------------------------------------------------------------------

def test_dump_load_round_trip(tmp_path):
    jobs = [make_job("a", arrival=1.0, sigma=0.2, rollout_max=150.0, tail_frac=0.2),
            make_job("b", arrival=2.0, model="qwen2.5-7b", slo=1.3, rollout_gpus=16)]
    path = tmp_path / "trace.jsonl"
    dump_jobs(jobs, path)
    trace = load_jobs(path)
    assert trace.jobs == jobs
    assert trace.warnings == []
    assert trace.source == str(path)


def test_dump_load_round_trip_keeps_the_modes_a_job_cannot_take(tmp_path):
    jobs = [make_job("a", cannot=["tail_migration", "colocate"]), make_job("b")]
    path = tmp_path / "trace.jsonl"
    dump_jobs(jobs, path)
    assert load_jobs(path).jobs == jobs
    first, second = (json.loads(line) for line in path.read_text().splitlines())
    assert first["cannot"] == ["colocate", "tail_migration"] and "cannot" not in second


def test_load_missing_trace_is_an_input_error(tmp_path):
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(InputError) as exc:
        load_jobs(missing)
    assert exc.value.place == str(missing)


def test_load_non_utf8_trace_is_an_input_error(tmp_path):
    p = tmp_path / "bin.jsonl"
    p.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(InputError) as exc:
        load_jobs(p)
    assert exc.value.place == str(p)


def test_load_trace_errors_name_the_path(tmp_path):
    p = write(tmp_path, "t.jsonl", json.dumps(job_record("a")) + "\nnot json\n")
    with pytest.raises(InputError) as exc:
        load_jobs(p)
    assert exc.value.place == f"{p}:2"


# -- cluster YAML ----------------------------------------------------------------------------

def test_cluster_yaml_parses_values():
    cluster, warnings = parse_cluster(CLUSTER_YAML, "c.yaml")
    assert warnings == []
    assert cluster.pools.train.max_nodes == 4
    assert cluster.pools.rollout.max_nodes is None
    assert cluster.pools.train.price_per_gpu_hour == 2.85
    assert cluster.cold_switch_s == 135.0


def test_cluster_invalid_value_names_line_and_dotted_field():
    text = CLUSTER_YAML.replace("price_per_gpu_hour: 2.85", "price_per_gpu_hour: -1")
    with pytest.raises(InputError) as exc:
        parse_cluster(text, "c.yaml")
    assert exc.value.place == "c.yaml:4: field 'pools.train.price_per_gpu_hour'"


def test_cluster_invalid_block_value_names_its_own_line():
    text = BLOCK_YAML.replace("price_per_gpu_hour: 2.85", "price_per_gpu_hour: lots")
    with pytest.raises(InputError) as exc:
        parse_cluster(text, "c.yaml")
    assert exc.value.place == "c.yaml:7: field 'pools.train.price_per_gpu_hour'"


def test_cluster_invalid_top_level_value_names_line():
    text = CLUSTER_YAML.replace("warm_switch_s: 2.0", "warm_switch_s: -2.0")
    with pytest.raises(InputError) as exc:
        parse_cluster(text, "c.yaml")
    assert exc.value.place == "c.yaml:5: field 'warm_switch_s'"


def test_cluster_missing_pool_names_field():
    text = "pools:\n  rollout: {gpu: H20, price_per_gpu_hour: 1.0}\n"
    with pytest.raises(InputError) as exc:
        parse_cluster(text, "c.yaml")
    assert exc.value.place.startswith("c.yaml:")
    assert exc.value.place.endswith("field 'pools.train'")


def test_cluster_unknown_top_level_field_is_an_error_naming_its_line():
    with pytest.raises(InputError) as exc:
        parse_cluster(CLUSTER_YAML + "region: eu\n", "c.yaml")
    assert str(exc.value) == "c.yaml:7: field 'region': unknown field"


def test_cluster_unknown_nested_field_is_an_error_naming_its_line_and_dotted_name():
    text = BLOCK_YAML.replace("    gpu: H800\n", "    gpu: H800\n    colour: red\n")
    with pytest.raises(InputError) as exc:
        parse_cluster(text, "c.yaml")
    assert exc.value.place == "c.yaml:7: field 'pools.train.colour'"


@pytest.mark.parametrize("old,new,place", [
    ("gpus_per_node: 8, host_gb_per_node: 2048, price_per_gpu_hour: 2.85",
     "gpus_per_node: 99999999, host_gb_per_node: 2048, price_per_gpu_hour: 2.85",
     "c.yaml:4: field 'pools.train.gpus_per_node'"),
    ("max_nodes: 4", "max_nodes: 9999999", "c.yaml:4: field 'pools.train.max_nodes'"),
    ("price_per_gpu_hour: 1.00", "price_per_gpu_hour: 1.0e+300", "c.yaml:3: field 'pools.rollout.price_per_gpu_hour'"),
    ("host_gb_per_node: 2048, price_per_gpu_hour: 1.00", "host_gb_per_node: 1.0e+12, price_per_gpu_hour: 1.00",
     "c.yaml:3: field 'pools.rollout.host_gb_per_node'"),
    ("cold_switch_s: 135.0", "cold_switch_s: 1.0e+300", "c.yaml:6: field 'cold_switch_s'"),
    ("warm_switch_s: 2.0", "warm_switch_s: 2.0\ninter_pool_gbps: 1.0e+30", "c.yaml:6: field 'inter_pool_gbps'"),
])
def test_cluster_counts_sizes_prices_and_times_are_bounded(old, new, place):
    assert old in CLUSTER_YAML
    with pytest.raises(InputError) as exc:
        parse_cluster(CLUSTER_YAML.replace(old, new), "c.yaml")
    assert exc.value.place == place


def test_cluster_bad_yaml_names_line():
    with pytest.raises(InputError) as exc:
        parse_cluster("pools:\n  rollout: {gpu: H20\n  train: x\n", "c.yaml")
    assert exc.value.place.startswith("c.yaml:")
    assert "YAML" in exc.value.reason


@pytest.mark.parametrize("text", ["", "- a\n- b\n", "just a string\n"])
def test_cluster_non_mapping_is_an_error(text):
    with pytest.raises(InputError) as exc:
        parse_cluster(text, "c.yaml")
    assert exc.value.place == "c.yaml"


def test_load_missing_cluster_is_an_input_error(tmp_path):
    missing = tmp_path / "nope.yaml"
    with pytest.raises(InputError) as exc:
        load_cluster(missing)
    assert exc.value.place == str(missing)


def test_load_cluster_default_is_the_paper_cluster():
    cluster, warnings = load_cluster(None)
    assert cluster == default_cluster()
    assert warnings == []


def test_load_cluster_from_file(tmp_path):
    cluster, warnings = load_cluster(write(tmp_path, "c.yaml", CLUSTER_YAML))
    assert cluster.pools.train.max_nodes == 4
    assert warnings == []


# -- job files (YAML or JSON: `rollmux submit` and `rollmux run`) ------------------------------

JOB_YAML = """\
job_id: j0
arrival_s: 0.0
duration_s: 3600.0
slo: 1.5
rollout_gpus: 16
train_gpus: 8
rollout_s:
  median: 240.0
  sigma: 0.1
  max: 280.0
train_s: 180.0
sync_s: 12.0
host_gb: {rollout: 30.0, train: 112.0}
"""


def test_a_job_file_gives_its_record():
    assert parse_job_file(JOB_YAML, "j.yaml")["rollout_s"] == {"median": 240.0, "sigma": 0.1, "max": 280.0}


def test_a_job_file_error_names_the_fields_own_line():
    with pytest.raises(InputError) as exc:
        parse_job_file(JOB_YAML.replace("sigma: 0.1", "sigma: 9"), "j.yaml")
    assert exc.value.place == "j.yaml:9: field 'rollout_s.sigma'"


def test_a_job_files_unknown_field_is_an_error_naming_its_line():
    with pytest.raises(InputError) as exc:
        parse_job_file(JOB_YAML.replace("slo: 1.5\n", "slo: 1.5\ncolour: red\n"), "j.yaml")
    assert str(exc.value) == "j.yaml:5: field 'colour': unknown field"


def test_a_json_job_file_names_its_lines_too():
    text = json.dumps(job_record("a", train_gpus=0), indent=2)
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if '"train_gpus"' in ln)
    with pytest.raises(InputError) as exc:
        parse_job_file(text, "j.json")
    assert exc.value.place == f"j.json:{line}: field 'train_gpus'" and line > 1
