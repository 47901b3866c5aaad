"""deploy/docker and deploy/k8s/kustomization.yaml: the images' pins agree with each other, the package and the
RayCluster, and the kustomize base renders (with the real renderer, `kubectl kustomize`; no cluster).

The scheduler reads the pools through the Ray client, which needs the same Ray and Python on both sides: a
scheduler image whose Ray differs from the Ray image's fails at connect time, not at build time. So the pins
are checked here, where an edit to one file but not the other fails.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCKER = ROOT / "deploy" / "docker"
SCHEDULER, RAY = DOCKER / "scheduler.Dockerfile", DOCKER / "ray.Dockerfile"
K8S = ROOT / "deploy" / "k8s"
GUIDE = ROOT / "docs" / "deploy.md"


class PinError(AssertionError):
    """Two files that must agree on a version do not (the message names both)."""


def build_args(text: str) -> dict[str, str]:
    """Every `ARG NAME=default` of a Dockerfile (global or per stage; a later default of a name wins)."""
    out = {}
    for name, default in re.findall(r"^ARG\s+(\w+)(?:=(\S+))?\s*$", text, re.M):
        if default:
            out[name] = default
    return out


def expand(text: str, args: dict[str, str]) -> str:
    """`${NAME}` and `$NAME` replaced by the build arguments' defaults."""
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args[m[1] or m[2]], text)


def base_image(text: str) -> str:
    """The image the (single) stage is built FROM, its arguments expanded."""
    (line,) = re.findall(r"^FROM\s+(\S+)", text, re.M)
    return expand(line, build_args(text))


def pip_ray_pins(text: str) -> set[str]:
    """The Ray versions a Dockerfile's `pip install` lines pin (`ray==X`, `ray[extra]==X`), expanded."""
    runs = " ".join(re.findall(r"^RUN\s+((?:.*\\\n)*.*)$", text, re.M))
    return set(re.findall(r"\bray(?:\[[\w,]+\])?==([\w.]+)", expand(runs, build_args(text))))


def ray_cluster() -> dict:
    """The RayCluster document of deploy/k8s/30-raycluster.yaml."""
    (doc,) = [d for d in yaml.safe_load_all((K8S / "30-raycluster.yaml").read_text()) if d]
    return doc


def check_ray_pins(scheduler: str, ray: str, ray_version: str) -> None:
    """PinError unless both images install Ray `ray_version` (the RayCluster's) on the same Python."""
    image = re.fullmatch(r"rayproject/ray:([\w.]+)-py(\d)(\d+)-gpu", base_image(ray))
    if image is None:
        raise PinError(f"{RAY.name}: FROM {base_image(ray)} is not a rayproject/ray:<version>-py<NN>-gpu image")
    for name, text, want in ((SCHEDULER.name, scheduler, {image[1]}), (RAY.name, ray, {image[1]})):
        if pip_ray_pins(text) != want:
            raise PinError(f"{name}: pip pins ray {sorted(pip_ray_pins(text))}, the Ray image is {image[1]}")
    if image[1] != ray_version:
        raise PinError(f"{RAY.name}: Ray {image[1]}, 30-raycluster.yaml: rayVersion {ray_version}")
    python = re.fullmatch(r"python:([\d.]+)-slim", base_image(scheduler))
    if python is None or python[1] != f"{image[2]}.{image[3]}":
        raise PinError(f"{SCHEDULER.name}: FROM {base_image(scheduler)}, the Ray image's Python is "
                       f"{image[2]}.{image[3]}")


def test_both_images_pin_the_ray_clusters_ray_and_python():
    check_ray_pins(SCHEDULER.read_text(), RAY.read_text(), ray_cluster()["spec"]["rayVersion"])


def test_the_pins_come_from_one_build_arg_in_each_dockerfile():
    for path in (SCHEDULER, RAY):
        text = path.read_text()
        assert "RAY_VERSION" in build_args(text), path.name
        assert re.search(r"ray(\[client\])?==\$\{RAY_VERSION\}", text), path.name
    assert build_args(SCHEDULER.read_text())["RAY_VERSION"] == build_args(RAY.read_text())["RAY_VERSION"]


@pytest.mark.parametrize("edit", ["scheduler's ray", "ray image", "rayVersion", "scheduler's python"])
def test_a_pin_out_of_step_fails_the_check(edit):
    scheduler, ray, version = SCHEDULER.read_text(), RAY.read_text(), ray_cluster()["spec"]["rayVersion"]
    if edit == "scheduler's ray":
        scheduler = re.sub(r"^ARG RAY_VERSION=\S+", "ARG RAY_VERSION=2.9.0", scheduler, flags=re.M)
    elif edit == "ray image":
        ray = re.sub(r"^ARG RAY_VERSION=\S+", "ARG RAY_VERSION=2.9.0", ray, flags=re.M)
    elif edit == "rayVersion":
        version = "2.9.0"
    else:
        scheduler = re.sub(r"^ARG PYTHON_VERSION=\S+", "ARG PYTHON_VERSION=3.12", scheduler, flags=re.M)
    with pytest.raises(PinError):
        check_ray_pins(scheduler, ray, version)


def test_the_images_install_this_packages_wheel_and_the_manifests_run_those_images():
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    for path in (SCHEDULER, RAY):
        text = path.read_text()
        assert build_args(text)["ROLLMUX_VERSION"] == version, path.name
        assert "/dist/rollmux-${ROLLMUX_VERSION}-py3-none-any.whl" in text, path.name
    images = set(re.findall(r"image: (rollmux/\S+)", "\n".join(p.read_text() for p in K8S.glob("*.yaml"))))
    assert images == {f"rollmux/rollmux:{version}", f"rollmux/rollmux-ray:{version}"}


def test_the_guide_builds_the_dockerfiles_it_names_and_holds_none_of_its_own():
    guide = GUIDE.read_text()
    assert "```dockerfile" not in guide
    for path in (SCHEDULER, RAY):
        assert f"docker build -f deploy/docker/{path.name}" in guide, path.name


def kustomization() -> dict:
    """deploy/k8s/kustomization.yaml."""
    return yaml.safe_load((K8S / "kustomization.yaml").read_text())


def test_the_kustomize_base_lists_every_manifest():
    listed = kustomization()["resources"]
    assert listed == sorted(p.name for p in K8S.glob("*.yaml") if p.name != "kustomization.yaml")


def _key(doc: dict) -> tuple[str, str, str]:
    return doc["apiVersion"], doc["kind"], doc["metadata"]["name"]


def test_the_kustomize_base_renders_every_manifest_unchanged():
    kubectl = shutil.which("kubectl")
    if kubectl is None:  # make test installs it (apt-get install kubernetes-client): a missing one is a failure
        pytest.fail("kubectl is not on PATH: `make test` installs it (apt-get install kubernetes-client)")
    done = subprocess.run([kubectl, "kustomize", str(K8S)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    rendered = {_key(d): d for d in yaml.safe_load_all(done.stdout) if d}
    source = {_key(d): d for name in kustomization()["resources"]
              for d in yaml.safe_load_all((K8S / name).read_text()) if d}
    assert set(rendered) == set(source)
    for key, doc in source.items():
        assert rendered[key] == doc, key
