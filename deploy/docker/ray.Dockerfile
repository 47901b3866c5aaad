# syntax=docker/dockerfile:1
# rollmux/rollmux-ray:<ROLLMUX_VERSION> -- the Ray nodes of both pools: Ray, RollMux's job side, and what the
# jobs need (here the demo extra, torch; add your RL framework, e.g. rollmux[trl]). From the repository root,
# after `pip wheel --no-deps -w dist .`:
#   docker build -f deploy/docker/ray.Dockerfile -t rollmux/rollmux-ray:0.1.0 .
# RAY_VERSION and PYTHON_TAG name the base image; scheduler.Dockerfile installs the same Ray on the same
# Python, and deploy/k8s/30-raycluster.yaml declares it as `rayVersion` (tests/test_deploy_files.py).
ARG RAY_VERSION=2.60.0
ARG PYTHON_TAG=py311
FROM rayproject/ray:${RAY_VERSION}-${PYTHON_TAG}-gpu
ARG RAY_VERSION
ARG ROLLMUX_VERSION=0.1.0
# ray==RAY_VERSION keeps the image's own Ray: installing the wheel never moves it.
# (The wheel is bind-mounted from dist/, BuildKit's default: it never becomes a layer of the image.)
RUN --mount=type=bind,source=dist,target=/dist \
    pip install --no-cache-dir "/dist/rollmux-${ROLLMUX_VERSION}-py3-none-any.whl[demo]" "ray==${RAY_VERSION}"
