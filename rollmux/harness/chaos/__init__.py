"""`rollmux chaos`: fault injection against a live local scheduler. `command` runs the scenarios
and prints the report; `run` is the shared server and one scenario's bookkeeping, `scenarios` the
job-level scenarios and the plan, `faults` the server-level ones, `waiting` the many waiting jobs,
`checks` the checks (phase logs, lost jobs, state diffs), `job` the synthetic job."""
