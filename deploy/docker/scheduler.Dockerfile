# syntax=docker/dockerfile:1
# rollmux/rollmux:<ROLLMUX_VERSION> -- the scheduler: `rollmux serve` (no torch: `pip install rollmux` is the
# scheduler, simulator, study and service). From the repository root, after `pip wheel --no-deps -w dist .`:
#   docker build -f deploy/docker/scheduler.Dockerfile -t rollmux/rollmux:0.1.0 .
# `rollmux serve --ray ray://...` reads the pools through the Ray client, which needs the same Ray and Python
# versions as the Ray cluster: RAY_VERSION and PYTHON_VERSION are those of ray.Dockerfile's base image (and
# of `rayVersion` in deploy/k8s/30-raycluster.yaml); tests/test_deploy_files.py checks that they agree.
ARG PYTHON_VERSION=3.11
FROM python:${PYTHON_VERSION}-slim
ARG RAY_VERSION=2.60.0
ARG ROLLMUX_VERSION=0.1.0
# One resolve: the wheel and the Ray client pinned to the cluster's Ray (rollmux alone asks only ray>=2.9).
# (The wheel is bind-mounted from dist/, BuildKit's default: it never becomes a layer of the image.)
RUN --mount=type=bind,source=dist,target=/dist \
    pip install --no-cache-dir "/dist/rollmux-${ROLLMUX_VERSION}-py3-none-any.whl" "ray[client]==${RAY_VERSION}"
# The server runs as 10001 (deploy/k8s/40-scheduler.yaml's runAsUser), never as root.
USER 10001:10001
EXPOSE 8470
ENTRYPOINT ["rollmux"]
CMD ["serve", "--help"]
