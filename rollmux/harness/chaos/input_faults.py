"""The input scenarios of `rollmux chaos` (see `rollmux.harness.chaos.command`): a tenant that sends
poisoned numbers. Each is a body run on a `Run`."""

from __future__ import annotations

import httpx

from rollmux.harness.chaos.job import PhaseLog
from rollmux.harness.chaos.run import PHASE_S, SERVE_ARGS, TIMINGS, Run
from rollmux.shim import ITERATION, PhaseTimings

# Release timings a broken or hostile job may send, as raw JSON (Infinity and NaN are no JSON, but
# Python's json and many clients write them): each must be refused with 400 naming the field.
POISON = ("Infinity", "-Infinity", "NaN", "1e308", "1e999", "-1", "true", '"0.1"')
ZERO_ITERATIONS = 3  # iterations released with run_s 0 ("too short to measure") on a repairing server


def _raw_release(run: Run, job_id: str, token: str, grant_no: int, run_s: str) -> httpx.Response:
    """A release of training whose `run_s` is the JSON text `run_s`, written by hand."""
    body = ('{"phase": "train", "grant_no": %d, "timings": {"wait_s": 0, "onload_s": 0, "run_s": %s, '
            '"offload_s": 0}}' % (grant_no, run_s))
    return httpx.post(f"{run.url}/v1/jobs/{job_id}/release", content=body, timeout=30.0,
                      headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})


def _healthy(run: Run, job_id: str, token: str) -> tuple[int, int]:
    """The status codes of GET /v1/status (admin) and GET /v1/jobs/{id} (the job's token)."""
    status = run.http("GET", "/v1/status", run.admin_token).status_code
    job = run.http("GET", f"/v1/jobs/{job_id}", token).status_code
    return status, job


def poisoned_timing(run: Run) -> None:
    """A job releases training with run_s Infinity, NaN, 1e308, -1 and the like: each is refused with
    400 naming timings.run_s, status and the job's view still answer 200, and the job's next release
    (real timings) succeeds; releases of run_s 0 on a server that repairs drift succeed too."""
    run.own_server("poisoned", SERVE_ARGS + ["--repair"])
    client, placed = run.submit("pt-a", slo=1.0)
    token = placed["token"]
    log = PhaseLog(run.log_dir, "pt-a")
    codes: dict[str, int] = {}
    health: dict[str, list[int]] = {}
    next_release = None
    for it in range(ZERO_ITERATIONS + 1):
        for phase in ITERATION:
            grant = client.acquire_dict("pt-a", phase)
            log.end(log.start(grant, it, 0.0))
            if phase == "train" and it == ZERO_ITERATIONS:  # the last iteration: the poison first
                codes, health = _poison(run, token, grant["grant_no"])
                r = run.http("POST", "/v1/jobs/pt-a/release", token,
                             {"phase": "train", "grant_no": grant["grant_no"], "timings": TIMINGS})
                next_release = r.status_code
                run.check(r.status_code == 200, f"the release after the poison: {r.status_code} {r.text[:200]}")
                continue
            # run_s 0 ("too short to measure") before, then the declared phase time
            run_s = 0.0 if it < ZERO_ITERATIONS else PHASE_S
            client.release(PhaseTimings("pt-a", phase, 0.0, 0.0, run_s, 0.0, grant["epoch"]))
    log.close()
    st = run.status()
    run.check(st["jobs"]["pt-a"]["iterations"] == ZERO_ITERATIONS + 1,
              f"pt-a counted {st['jobs']['pt-a']['iterations']} iterations, not {ZERO_ITERATIONS + 1}")
    after = _healthy(run, "pt-a", token)
    run.check(after == (200, 200), f"at the end status, job answered {after}")
    client.finish("pt-a")
    run.extras["poisoned_timing"] = {"release_codes": codes, "health_after_each": health,
                                     "next_release": next_release, "zero_run_s_iterations": ZERO_ITERATIONS,
                                     "health_at_end": list(after)}


def _poison(run: Run, token: str, grant_no: int) -> tuple[dict[str, int], dict[str, list[int]]]:
    """Release pt-a's training with each POISON value: (status code of each, [status, job] codes after each)."""
    codes: dict[str, int] = {}
    health: dict[str, list[int]] = {}
    for text in POISON:
        r = _raw_release(run, "pt-a", token, grant_no, text)
        codes[text] = r.status_code
        is_json = r.headers.get("content-type", "").startswith("application/json")
        field = r.json().get("field") if is_json else None
        run.check(r.status_code == 400 and field == "timings.run_s",
                  f"release with run_s {text}: {r.status_code} field {field} (wanted 400 timings.run_s)")
        health[text] = list(_healthy(run, "pt-a", token))
        run.check(health[text] == [200, 200], f"after run_s {text}: status, job answered {health[text]}")
    return codes, health
