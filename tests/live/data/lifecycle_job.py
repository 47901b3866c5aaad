"""An entrypoint `rollmux run` launches in the lifecycle tests; argv[1] says how it behaves.

- `exit3`: before any call to the service, writes a traceback to stderr, the wall-clock time it
  exits at to the file $EXITED, and exits with code 3 (a driver whose imports failed);
- `exit0`: exits 0 without a call (a driver that forgot to finish);
- `finish SECONDS`: waits SECONDS before its first call (slow imports), then heartbeats every 0.2 s,
  and finishes.
"""

import os
import sys
import time

mode = sys.argv[1]
if mode == "exit3":
    print("Traceback (most recent call last):\n  File \"train.py\", line 1, in <module>", file=sys.stderr)
    print("ModuleNotFoundError: No module named 'flash_attn'", file=sys.stderr, flush=True)
    with open(os.environ["EXITED"], "w") as f:
        f.write(repr(time.time()))
    sys.exit(3)
if mode == "exit0":
    sys.exit(0)
time.sleep(float(sys.argv[2]))  # the driver's slow imports: time passing is the point
from rollmux.live.client import from_env  # noqa: E402

job_id, client = from_env(heartbeat_s=0.2)
client.heartbeat(job_id)
client.finish(job_id)
client.close()
print(f"lifecycle job {job_id}: finished", flush=True)
