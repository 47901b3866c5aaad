"""Fixtures shared by several test modules (a real redis-server the tests start themselves), and
the markers every test gets.

Markers (registered in pyproject.toml, where --strict-markers refuses any other). Every collected
test gets exactly one of `packaging`, `integration` and `unit`, decided in that order, and `slow`
on top where it applies. They only select: `make test` runs every test, `make test-fast` runs
`-m "unit and not slow"`.

- packaging: the node ids starting with a prefix in PACKAGING (builds the wheel and installs it
  into fresh virtualenvs).
- integration: a test that starts a real process or server. Either it uses the `redis_port`
  fixture (a redis-server), directly or through other fixtures, or it is the "redis" case of a
  parametrized store fixture that asks for `redis_port` while it runs (a parameter whose value
  is the string "redis"); or its node id starts with a prefix in INTEGRATION: the modules and
  tests that start the HTTP server (ThreadServer, ProcessServer, `rollmux serve`), Ray,
  Chromium, Python or the CLI in a subprocess, spawned processes or network namespaces, each
  entry saying which.
- unit: every other test: this process only, no server, no subprocess. tests/core and tests/sim
  hold unit tests alone, and need neither redis-server, Ray nor the shared traces
  (tests/test_standalone.py runs them so).
- slow: the node ids starting with a prefix in SLOW: the tests measured over SLOW_S seconds
  (setup, call and teardown; the largest of three full runs with --durations=0 on 2 cores). A
  module whose module-scoped fixture is the slow part, or whose tests are nearly all slow, is
  listed whole: a fixture's cost falls on whichever of its tests runs first. tests/test_structure.py
  is left out on purpose: it parses every module (about 2 s), and those are the rules every
  change must keep, so the fast subset runs them.

A prefix names a module (`tests/x.py`), a test with all its parameters (`tests/x.py::test_y`) or
the tests whose names start with it; tests/test_markers.py checks that each still names one.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from redis_server import redis_binary, start_redis

KINDS = ("packaging", "integration", "unit")

PACKAGING = ("tests/test_packaging.py",)

INTEGRATION = {
    "tests/harness/chaos/test_chaos.py::test_every_scenario_ran": "the chaos scenarios' servers (fixture `report`)",
    "tests/harness/chaos/test_chaos.py::test_scenario_": "the chaos scenarios' servers (fixture `report`)",
    "tests/live/test_dashboard_live.py": "ThreadServer and Chromium",
    "tests/live/test_dashboard_page.py::test_dashboard_renders": "a canned HTTP server and Chromium",
    "tests/live/test_dashboard_page.py::test_a_script_like_job_id": "a canned HTTP server and Chromium",
    "tests/live/test_dashboard_page.py::test_screenshot_is_a_real_picture": "a canned HTTP server and Chromium",
    "tests/live/test_dashboard_page.py::test_without_the_cookie": "a canned HTTP server and Chromium",
    "tests/live/test_dashboard_page.py::test_with_the_cookie": "a canned HTTP server and Chromium",
    "tests/live/test_dashboard_page.py::test_login_page_shows": "a canned HTTP server and Chromium",
    "tests/live/test_dashboard_page.py::test_a_colocated_job_has_a_card": "a canned HTTP server and Chromium",
    "tests/live/test_http_api.py": "ThreadServer (fixture `api`)",
    "tests/live/test_journal_faults.py::test_over_http_": "ThreadServer over a failing journal (fixture `served`)",
    "tests/live/test_client_retry.py": "a canned HTTP server answering a scripted sequence of statuses",
    "tests/live/test_health_routes.py": "ThreadServer (fixture `served`)",
    "tests/test_deploy_dashboard.py": "ThreadServer (fixture `service`)",
    "tests/test_deploy_files.py::test_the_kustomize_base_renders": "`kubectl kustomize` in a subprocess",
    "tests/live/test_browser_security.py": "ThreadServer (fixture `site`)",
    "tests/live/test_metrics_auth.py": "ThreadServer and `rollmux serve` in subprocesses (ProcessServer)",
    "tests/live/test_live_figures.py": "ThreadServer, restarted on its store",
    "tests/live/test_serve_secrets.py": "a redis-server with a password and `rollmux serve` in subprocesses",
    "tests/live/test_turn_grace.py": "ThreadServer (class `Pair`)",
    "tests/live/test_strict_input.py": "ThreadServer (class `Served`)",
    "tests/live/journal/test_base.py::test_a_writer_in_another_process": "a Python subprocess holding the store",
    "tests/live/test_live_estimates.py::test_rollmux_serve_repairs_live": "ProcessServer (`rollmux serve`)",
    "tests/live/test_live_estimates.py::test_the_shims_host_memory_reaches_the_scheduler_over_http": "ThreadServer",
    "tests/live/test_live_node_loss.py": "a Ray cluster and ThreadServer",
    "tests/live/test_ray_inventory.py": "a multi-raylet Ray cluster",
    "tests/live/test_cli_run.py": "a multi-raylet Ray cluster, ThreadServer and `rollmux run` in subprocesses",
    "tests/live/test_run_lifecycle.py::test_run_": "`rollmux serve` and `rollmux run --local` in subprocesses "
                                                   "(fixture `served`)",
    "tests/live/test_serve_ray.py": "a multi-raylet Ray cluster and `rollmux serve --ray` in a subprocess",
    "tests/live/test_live_placements_why.py::test_status_and_metric_say_why": "ThreadServer",
    "tests/live/test_live_service.py::test_http_server_serves_permits": "ThreadServer",
    "tests/live/test_permit_latency_bench.py": "the benchmark's HTTP servers (threads)",
    "tests/harness/test_profile.py::test_a_grpo_preset_profile_is_accepted_and_placed_by_a_running": "ThreadServer",
    "tests/live/test_serve.py": "`rollmux serve` in subprocesses (ProcessServer)",
    "tests/study/test_sweep.py::test_ray_map_returns": "a private local Ray (fixture `ray_map`)",
    "tests/study/test_sweep.py::test_a_study_section_through_ray": "a private local Ray (fixture `ray_map`)",
    "tests/study/test_sweep.py::test_a_task_that_raises_is_named": "a private local Ray (fixture `ray_map`)",
    "tests/study/test_sweep.py::test_an_error_that_comes_back_whole": "a private local Ray (fixture `ray_map`)",
    "tests/test_extras.py::test_a_command_that_needs_torch": "the CLI in a subprocess without torch",
    "tests/test_extras.py::test_a_user_job_importing_torch": "the CLI in a subprocess without torch",
    "tests/test_extras.py::test_a_missing_module_that_no_extra": "the CLI in a subprocess without torch",
    "tests/test_extras.py::test_the_trl_adapter_without_trl": "Python in a subprocess without trl",
    "tests/test_extras.py::test_the_cli_and_the_service_never_import_torch": "Python in a subprocess",
    "tests/test_cli_profile.py::test_serve_refuses_a_setting": "`rollmux serve` in a subprocess",
    "tests/test_cli_profile.py::test_serve_runs_the_shipped_profile": "ProcessServer (`rollmux serve`)",
    "tests/test_standalone.py": "pytest on tests/core and tests/sim in a subprocess",
    "tests/test_newcomer_traps.py::test_simulate_refuses_a_job_asking": "the CLI in a subprocess",
    "tests/test_newcomer_traps.py::test_serve_at_log_level": "`rollmux serve` in a subprocess (fixture `serve_log`)",
    "tests/test_newcomer_traps.py::test_serve_logs_a_refused": "`rollmux serve` in a subprocess (fixture `serve_log`)",
    "tests/test_docs_site.py": "`mkdocs build --strict` in a subprocess (fixture `site`)",
    "tests/harness/test_profile_run.py": "`rollmux profile --run` and the program it profiles, as subprocesses",
    "tests/test_tutorial.py::test_run_": "bash running docs/tutorial.md: `rollmux serve` and `rollmux run` (fixture)",
    "tests/weightsync/test_weightsync_bench.py": "network namespaces (ip, tc)",
    "tests/weightsync/test_weightsync_sync.py::test_spawned_processes": "spawned processes over a TCPStore",
    "tests/live/journal/test_repair_damage.py::test_rollmux_serve_on": "rollmux serve as a child process",
    "tests/live/journal/test_repair_damage.py::test_journal_check_counts": "rollmux journal as child processes",
    "tests/adapters/test_trl_under_serve.py": "three `rollmux serve`, four `rollmux run --local` and a TRL script "
                                              "as child processes",
    "tests/adapters/test_trl_docs.py::test_the_snippet_under_rollmux": "ThreadServer",
    "tests/adapters/test_verl.py": "a private Ray cluster, two veRL job processes and the GPU script's dry run "
                                   "(fixture `runs`)",
}

SLOW_S = 0.5
SLOW = (
    # modules listed whole: a slow module-scoped fixture, or nearly every test slow
    "tests/live/journal/test_repair_damage.py",
    "tests/live/test_journal_faults.py::test_over_http_",
    "tests/live/test_client_retry.py",
    "tests/adapters/test_trl.py",
    "tests/adapters/test_trl_vllm.py",
    "tests/adapters/test_trl_under_serve.py",
    "tests/adapters/test_trl_docs.py",
    "tests/adapters/test_verl.py",  # two veRL jobs' start-ups, one after the other (fixture `runs`)
    "tests/jobs/test_grpo_example.py",
    "tests/study/test_paper_trace_section.py",
    "tests/live/test_dashboard_live.py",
    "tests/live/test_dashboard_page.py",
    "tests/live/test_live_node_loss.py",
    "tests/live/test_permit_latency_bench.py",
    "tests/live/test_serve.py",
    "tests/live/test_metrics_auth.py",
    "tests/live/test_live_figures.py",
    "tests/live/test_serve_secrets.py",
    "tests/live/test_turn_grace.py",
    "tests/test_packaging.py",
    "tests/test_standalone.py",
    "tests/test_docs_site.py",  # one mkdocs build for the module (fixture `site`)
    "tests/harness/test_profile_run.py",
    # tests, each with all its parameters
    "tests/test_tutorial.py::test_run_",  # the tutorial's commands, run once by a module fixture
    "tests/harness/chaos/test_chaos.py::test_every_scenario_ran",  # these two share the slow fixture `report`
    "tests/harness/chaos/test_chaos.py::test_scenario_",
    "tests/core/placement/test_index.py::test_indexed_placement_equals_a_brute_force_scan",
    "tests/core/test_intra_group.py::test_best_round_robin_order_reaches_t_cycle_when_unsaturated",
    "tests/core/test_intra_group.py::test_period_equals_long_run_growth_of_the_schedule",
    "tests/core/test_intra_group.py::test_period_is_at_least_closed_form_bound",
    "tests/core/test_intra_group.py::test_planned_period_bounds_the_runtime_period_with_migration",
    "tests/core/test_intra_group.py::test_sync_ends_are_train_ends_plus_sync",
    "tests/core/repair/test_regroup.py::test_regroup_migrates_jobs_and_keeps_every_slo",
    "tests/core/repair/test_regroup.py::test_regroup_and_shrink_cost_no_more_than_static_groups",
    "tests/core/repair/test_regroup.py::test_consolidation_dissolves_small_groups_on_any_departure",
    "tests/core/placement/test_why.py::test_reasons_add_up_to_the_isolated_placements",
    "tests/core/placement/test_why.py::test_the_index_refuses_exactly_where_it_may_not_take_the_job",
    "tests/harness/test_profile.py::test_a_grpo_preset_profile_is_accepted_and_placed_by_a_running",
    "tests/live/journal/test_base.py::test_a_writer_in_another_process",
    "tests/live/test_http_api.py::test_an_acquire_that_cannot_be_granted_yet_answers_204",
    "tests/live/test_http_api.py::test_every_job_route_needs_a_token[DELETE-/v1/jobs/{id}-None]",
    "tests/live/test_http_api.py::test_polling_a_waiting_acquire_again_and_again",
    "tests/live/test_browser_security.py::test_live_sessions_are_capped",
    "tests/live/test_browser_security.py::test_chromium_",
    "tests/live/test_leases.py::test_a_hung_phase_fails_the_job_reclaims_its_nodes",
    "tests/live/test_run_lifecycle.py::test_run_",  # `rollmux run` processes against one `rollmux serve`
    "tests/live/test_exits.py::test_through_rays_job_api",  # imports Ray's job API
    "tests/live/test_live_estimates.py::test_rollmux_serve_repairs_live",
    "tests/sim/test_gavel.py::test_unpacked_plain_without_caps_is_within_half_a_percent",
    "tests/sim/test_sim_colocate.py::test_a_mixed_trace_meets_every_slo_and_its_counts_add_up",
    "tests/sim/test_sim_placements_why.py::test_the_json_counts_every_isolated_placement_once",
    "tests/study/test_baseline_sensitivity.py::test_every_run_of_every_trace_is_there_and_finishes",
    "tests/study/test_model_sections.py::test_drift_section_drifts_a_share_and_compares_repair",
    "tests/study/test_model_sections.py::test_migration_section_scales_the_price",
    "tests/study/test_offline_optimum.py::test_cheapest_group_matches_search_over_all_pin_assignments",
    "tests/study/test_sweep.py::test_a_study_section_through_ray",
    "tests/study/test_figures.py::test_every_figure_is_numbered_with_a_caption_and_its_csv",
    "tests/study/test_figures.py::test_the_quick_studys_group_size_figure_shows_what_the_size_does",
    "tests/study/test_sweep.py::test_number_list_reads_comma_separated_numbers",
    "tests/study/test_sweep.py::test_ray_map_returns",
    "tests/test_cli.py::test_no_compact_and_static_turn_rollout_compaction_off",
    "tests/test_cli.py::test_quick_study_writes_tables_and_plots",
    "tests/test_cli.py::test_simulate_json_has_exactly_the_documented_keys",
    "tests/test_cli.py::test_the_table_is_never_cut_to_ellipses",
    "tests/test_cli_colocate.py::test_colo_regroup_moves_colocated_jobs_into_groups",
    "tests/test_cli_colocate.py::test_colocate_counts_its_placements_and_keeps_the_why_sum",
    "tests/test_cli_profile.py::test_serve_refuses_a_setting",
    "tests/test_cli_profile.py::test_serve_runs_the_shipped_profile",
    "tests/test_newcomer_traps.py::test_simulate_refuses_a_job_asking",  # the CLI in a subprocess
    "tests/test_newcomer_traps.py::test_serve_at_log_level",  # these two share the fixture `serve_log`
    "tests/test_newcomer_traps.py::test_serve_logs_a_refused",
    "tests/test_extras.py::test_a_command_that_needs_torch",
    "tests/test_extras.py::test_a_user_job_importing_torch",
    "tests/test_extras.py::test_a_missing_module_that_no_extra",
    "tests/test_extras.py::test_the_trl_adapter_without_trl",
    "tests/test_extras.py::test_the_cli_and_the_service_never_import_torch",
    "tests/test_layers.py::test_imports_run_one_way",
    "tests/test_layers.py::test_only_the_demo_job_list_imports_adapters",
    "tests/test_shim.py::test_a_migrated_tail_is_recomputed_and_the_weights_match_a_solo_run",
    "tests/weightsync/test_weightsync_bench.py::test_topology_beats_flat_on_a_throttled_link",
    "tests/weightsync/test_weightsync_sync.py::test_spawned_processes",
)


def _starts_with(nodeid: str, prefixes) -> bool:
    return any(nodeid.startswith(p) for p in prefixes)


def kind_of(item: pytest.Item) -> str:
    """The one of KINDS a collected test gets (the module docstring's rule)."""
    if _starts_with(item.nodeid, PACKAGING):
        return "packaging"
    params = getattr(getattr(item, "callspec", None), "params", {})
    if ("redis_port" in item.fixturenames or any(isinstance(v, str) and v == "redis" for v in params.values())
            or _starts_with(item.nodeid, INTEGRATION)):
        return "integration"
    return "unit"


def _possible_markers(module: str) -> list[set[str]]:
    """Every marker set a test of `module` (a path from the root) may get, known from its path
    alone: what the module-wide entries of PACKAGING, INTEGRATION and SLOW fix."""
    kinds = ["packaging"] if module in PACKAGING else ["integration"] if module in INTEGRATION else [
        "unit", "integration"]
    slow = [{"slow"}] if module in SLOW else [set(), {"slow"}]
    return [{kind} | more for kind in kinds for more in slow]


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Leave unimported a module that `-m` selects no test from, known from its path alone: `make
    test-fast` then spends no time importing transformers for tests/adapters. Selection is the
    same as deselecting after import; only the deselected count leaves these modules out."""
    markexpr = config.getoption("markexpr", "")
    if (not markexpr or not collection_path.name.startswith("test_") or collection_path.suffix != ".py"
            or not collection_path.is_relative_to(config.rootpath)):
        return None  # conftest.py and helper modules are never left out
    try:  # pytest's own parser of `-m`; private, so an API change only costs the saving
        from _pytest.mark.expression import Expression
        expr = Expression.compile(markexpr)
    except Exception:  # noqa: BLE001 -- `-m` itself reports a bad expression
        return None
    sets = _possible_markers(collection_path.relative_to(config.rootpath).as_posix())
    return None if any(expr.evaluate(_has(marks)) for marks in sets) else True


def _has(marks: set[str]):
    """A matcher for Expression.evaluate: is a marker name among `marks`."""
    return lambda name, **_: name in marks


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by them
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Give every collected test its kind, and `slow` where SLOW names it."""
    for item in items:
        item.add_marker(kind_of(item))
        if _starts_with(item.nodeid, SLOW):
            item.add_marker("slow")


@pytest.fixture(scope="session")
def redis_port():
    """A throwaway redis-server on a free loopback port, shared by the session's tests."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = start_redis([redis_binary(), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                        "--appendonly", "no", "--daemonize", "no"], port)
    yield port
    proc.terminate()
    proc.wait(timeout=10)
