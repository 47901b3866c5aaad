"""deploy/: the manifests docs/deploy.md relies on, parsed and checked against each other and the real CLI.

An edit that breaks the guide fails here: a flag `rollmux serve` does not have, pools whose labels
no longer match between the RayCluster and Kueue's flavors, quotas that are not the pools' capacity,
a Redis that does not fsync every write, a secret written into a manifest, a systemd unit that would
not start the scheduler.
"""

from __future__ import annotations

import configparser
import json
import re
import shlex
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml
from typer.exceptions import TyperException
from typer.main import get_command

from rollmux.cli import app
from rollmux.core.spec import default_cluster
from rollmux.core.trace_io import load_cluster
from rollmux.live.app import create_app
from rollmux.live.journal.redis import PASSWORD_ENV
from rollmux.live.server import parse_listen
from rollmux.live.service import SchedulerCore

ROOT = Path(__file__).resolve().parents[1]
K8S = ROOT / "deploy" / "k8s"
UNIT = ROOT / "deploy" / "systemd" / "rollmux.service"
GUIDE = ROOT / "docs" / "deploy.md"
POOL_LABEL = "rollmux.io/pool"
GPU_LABEL = "rollmux.io/gpu"
GPU = "nvidia.com/gpu"
CLI = get_command(app)


def parse_cli(argv: list[str]) -> tuple[str, dict]:
    """(command, its parsed options) for `rollmux ARGV`, through the real app; raises on a flag it lacks."""
    with CLI.make_context("rollmux", list(argv)) as ctx:
        rest = [*getattr(ctx, "_protected_args", []), *ctx.args]
        name, cmd, sub = CLI.resolve_command(ctx, rest)
        return name, cmd.make_context(name, sub, parent=ctx).params


def quantity(q: str | int) -> float:
    """A Kubernetes quantity (cpu or memory) as a number: '96' -> 96, '1800Gi' -> 1800 * 2**30."""
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9}
    m = re.fullmatch(r"([0-9.]+)([A-Za-z]*)", str(q))
    assert m, q
    return float(m[1]) * units.get(m[2], 1)


def manifests() -> list[Path]:
    """The manifests under deploy/k8s: those its kustomize base lists (tests/test_deploy_files.py checks that
    it lists every one, and that it renders)."""
    return [K8S / name for name in yaml.safe_load((K8S / "kustomization.yaml").read_text())["resources"]]


@pytest.fixture(scope="module")
def docs() -> list[dict]:
    """Every document of every manifest under deploy/k8s (multi-document YAML)."""
    out = []
    for path in manifests():
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is not None:
                doc["__file__"] = path.name
                out.append(doc)
    return out


def one(docs: list[dict], kind: str, name: str | None = None) -> dict:
    """The single document of `kind` (and `name`)."""
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, (kind, name, [d["metadata"]["name"] for d in found])
    return found[0]


def container(pod_spec: dict, name: str) -> dict:
    """A pod template's container by name."""
    (found,) = [c for c in pod_spec["containers"] if c["name"] == name]
    return found


def cluster_file(docs: list[dict], tmp_path: Path):
    """The scheduler's cluster file from its ConfigMap, read by the real loader."""
    path = tmp_path / "cluster.yaml"
    path.write_text(one(docs, "ConfigMap", "rollmux-cluster")["data"]["cluster.yaml"])
    spec, warnings = load_cluster(path)
    assert warnings == []
    return spec


def serve_args(docs: list[dict]) -> tuple[dict, dict, list[str]]:
    """The scheduler Deployment's pod spec, container and argv, with $(VAR)s Kubernetes would expand."""
    pod = one(docs, "Deployment", "rollmux-scheduler")["spec"]["template"]["spec"]
    c = container(pod, "scheduler")
    env = {e["name"]: e for e in c.get("env", [])}
    argv = [*c["command"], *c["args"]]
    for var in {v for a in argv for v in re.findall(r"\$\((\w+)\)", a)}:
        assert var in env, f"$({var}) is not in the container's env"
    return pod, c, [re.sub(r"\$\((\w+)\)", "x", a) for a in argv]


def test_every_manifest_parses_with_the_api_versions_the_guide_names(docs):
    kinds = {(d["apiVersion"], d["kind"]) for d in docs}
    assert kinds == {
        ("v1", "Namespace"), ("v1", "ConfigMap"), ("v1", "Service"), ("apps/v1", "StatefulSet"),
        ("apps/v1", "Deployment"), ("networking.k8s.io/v1", "NetworkPolicy"), ("ray.io/v1", "RayCluster"),
        ("kueue.x-k8s.io/v1beta1", "ResourceFlavor"), ("kueue.x-k8s.io/v1beta1", "ClusterQueue"),
        ("kueue.x-k8s.io/v1beta1", "LocalQueue"), ("monitoring.coreos.com/v1", "ServiceMonitor")}
    guide = GUIDE.read_text()
    for api in ("ray.io/v1", "kueue.x-k8s.io/v1beta1", "monitoring.coreos.com/v1"):
        assert f"`{api}`" in guide, api
    namespaced = [d for d in docs if d["kind"] not in ("Namespace", "ResourceFlavor", "ClusterQueue")]
    assert {d["metadata"].get("namespace") for d in namespaced} == {one(docs, "Namespace")["metadata"]["name"]}
    for path in [*sorted(K8S.glob("*.yaml")), UNIT]:
        assert f"deploy/{path.relative_to(ROOT / 'deploy')}" in guide, f"{path.name} is not in docs/deploy.md"


def test_the_pools_match_between_the_ray_cluster_kueue_and_the_scheduler(docs, tmp_path):
    ray = one(docs, "RayCluster")
    groups = {g["groupName"]: g for g in ray["spec"]["workerGroupSpecs"]}
    flavors = {d["metadata"]["name"]: d["spec"]["nodeLabels"] for d in docs if d["kind"] == "ResourceFlavor"}
    queue = one(docs, "ClusterQueue")
    (rg,) = queue["spec"]["resourceGroups"]
    quota = {f["name"]: {r["name"]: r["nominalQuota"] for r in f["resources"]} for f in rg["flavors"]}
    assert set(quota) == set(flavors) and set(rg["coveredResources"]) == {"cpu", "memory", GPU}
    spec = cluster_file(docs, tmp_path)
    pools = {"rollout": spec.pools.rollout, "train": spec.pools.train}
    assert set(groups) == set(pools)
    for name, g in groups.items():
        pod = g["template"]["spec"]
        assert pod["nodeSelector"] == {POOL_LABEL: name}
        # Exactly one flavor can hold this group's pods; it carries the pool's GPU type.
        (flavor,) = [f for f, labels in flavors.items() if labels.get(POOL_LABEL) == name]
        assert flavors[flavor][GPU_LABEL] == pools[name].gpu
        req = container(pod, "ray-worker")["resources"]["requests"]
        assert container(pod, "ray-worker")["resources"]["limits"][GPU] == req[GPU]
        n = g["replicas"]
        assert g["minReplicas"] == g["maxReplicas"] == n == pools[name].max_nodes
        gpus = int(req[GPU])
        assert gpus == pools[name].gpus_per_node == int(g["rayStartParams"]["num-gpus"])
        # The ClusterQueue's quotas are exactly the pool's capacity: Kueue admits it whole, RollMux shares it.
        assert quota[flavor][GPU] == n * gpus
        for res in ("cpu", "memory"):
            assert quantity(quota[flavor][res]) == n * quantity(req[res]), (name, res)
        # The Ray custom resource that names the node's pool. KubeRay pastes the value into the `ray start`
        # shell command (--resources=VALUE), so it is read here as that shell would.
        assert json.loads(shlex.split(g["rayStartParams"]["resources"])[0]) == {f"{name}_pool": 1}
    head = ray["spec"]["headGroupSpec"]["template"]["spec"]
    (head_flavor,) = [f for f, labels in flavors.items() if labels == head["nodeSelector"]]
    assert quota[head_flavor][GPU] == 0
    head_req = container(head, "ray-head")["resources"]["requests"]
    assert all(quantity(quota[head_flavor][r]) >= quantity(head_req[r]) for r in ("cpu", "memory"))
    assert ray["spec"]["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"


def test_kueue_admits_the_ray_cluster_through_the_local_queue(docs):
    ray, local, queue = one(docs, "RayCluster"), one(docs, "LocalQueue"), one(docs, "ClusterQueue")
    assert ray["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == local["metadata"]["name"]
    assert local["spec"]["clusterQueue"] == queue["metadata"]["name"]
    assert local["metadata"]["namespace"] == ray["metadata"]["namespace"]
    assert ray["spec"]["enableInTreeAutoscaling"] is False


def test_redis_fsyncs_every_write_to_its_volume(docs):
    conf = one(docs, "ConfigMap", "rollmux-redis-conf")["data"]["redis.conf"]
    settings = dict(line.split(None, 1) for line in conf.splitlines() if line.strip() and not line.startswith("#"))
    assert settings["appendonly"] == "yes" and settings["appendfsync"] == "always"
    assert settings["maxmemory-policy"] == "noeviction"  # a journal must never be evicted
    sts = one(docs, "StatefulSet", "rollmux-redis")
    pod = sts["spec"]["template"]["spec"]
    redis = container(pod, "redis")
    mounts = {m["name"]: m["mountPath"] for m in redis["volumeMounts"]}
    (conf_vol,) = [v for v in pod["volumes"] if v.get("configMap", {}).get("name") == "rollmux-redis-conf"]
    assert redis["command"] == ["redis-server"] and redis["args"][0] == f"{mounts[conf_vol['name']]}/redis.conf"
    (claim,) = sts["spec"]["volumeClaimTemplates"]
    assert mounts[claim["metadata"]["name"]] == settings["dir"]  # the append-only file lands on the PVC


def test_the_scheduler_runs_rollmux_serve_with_real_flags_and_its_store(docs, tmp_path):
    pod, c, argv = serve_args(docs)
    assert argv[0] == "rollmux"
    command, params = parse_cli(argv[1:])
    assert command == "serve"
    dep = one(docs, "Deployment", "rollmux-scheduler")
    assert dep["spec"]["replicas"] == 1 and dep["spec"]["strategy"]["type"] == "Recreate"  # one writer per store
    # The API: --listen's port is the container's and the Service's.
    listen = parse_listen(params["listen"])
    assert listen.host == "0.0.0.0"
    port = listen.port
    (api,) = c["ports"]
    svc = one(docs, "Service", "rollmux")
    (svc_port,) = svc["spec"]["ports"]
    assert api["containerPort"] == port == svc_port["port"] and svc_port["targetPort"] == api["name"]
    assert svc["spec"]["selector"] == dep["spec"]["template"]["metadata"]["labels"]
    scheme = "HTTPS" if params["tls_cert"] else "HTTP"
    for probe in ("readinessProbe", "livenessProbe"):
        assert c[probe]["httpGet"]["port"] == api["name"] and c[probe]["httpGet"]["scheme"] == scheme
    # The store: the Redis Service, the password from its Secret, a prefix; --wait-store past the 10 s lease.
    url = urlsplit(params["store"])
    redis_svc = one(docs, "Service", "rollmux-redis")
    assert (url.scheme, url.hostname, url.port) == ("redis", redis_svc["metadata"]["name"], 6379)
    assert parse_qs(url.query)["prefix"] == ["rollmux"] and params["wait_store"] > 10
    assert url.password is None and params["redis_password_file"] is None  # the password: env, from the Secret
    assert {e["name"]: e["valueFrom"]["secretKeyRef"] for e in c["env"]}[PASSWORD_ENV] == {
        "name": "rollmux-redis", "key": "password"}
    # The cluster file: the ConfigMap mounted where --cluster points, and the real loader accepts it.
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    vols = {v["name"]: v for v in pod["volumes"]}
    (cfg_vol,) = [n for n, v in vols.items() if v.get("configMap", {}).get("name") == "rollmux-cluster"]
    assert str(params["cluster"]) == f"{mounts[cfg_vol]}/cluster.yaml"
    cluster_file(docs, tmp_path)
    # --ray: the RayCluster's head Service (KubeRay names it <cluster>-head-svc), Ray client port.
    ray = one(docs, "RayCluster")
    watch = urlsplit(params["ray_address"])
    head_ports = {p["name"]: p["containerPort"]
                  for p in container(ray["spec"]["headGroupSpec"]["template"]["spec"], "ray-head")["ports"]}
    assert (watch.scheme, watch.hostname, watch.port) == ("ray", f"{ray['metadata']['name']}-head-svc",
                                                          head_ports["client"])


def test_secrets_are_referenced_never_written_down(docs):
    assert not [d for d in docs if d["kind"] == "Secret"], "a Secret's value in a manifest"
    text = "\n".join(p.read_text() for p in manifests())
    referenced = set(re.findall(r"secretName: (\S+)", text)) | {
        m for m in re.findall(r"(?:secretKeyRef|credentials|secret):\s+name: (\S+)", text)}
    assert referenced == {"rollmux-admin", "rollmux-redis", "rollmux-tls", "rollmux-metrics"}
    guide = GUIDE.read_text()
    for name in referenced:  # the guide says how to create each one
        assert re.search(rf"kubectl -n rollmux create secret \S+ {name}\b", guide), name
    for d in docs:  # no env var carries a literal password or token
        for c in _containers(d):
            for e in c.get("env", []):
                assert "value" not in e or not re.search(r"PASSWORD|TOKEN|SECRET", e["name"]), e


def test_no_secret_is_ever_an_argument(docs):
    # Every user of a machine reads every process's argv (ps): a Secret reaches a process through its
    # environment or a file, never through $(VAR) in its command or arguments.
    for d in docs:
        for c in _containers(d):
            secret_vars = {e["name"] for e in c.get("env", []) if "secretKeyRef" in e.get("valueFrom", {})}
            argv = " ".join([*c.get("command", []), *c.get("args", [])])
            assert not {v for v in re.findall(r"\$\((\w+)\)", argv)} & secret_vars, (d["__file__"], c["name"])


def test_redis_reads_its_password_from_a_file_its_init_container_writes(docs):
    conf = one(docs, "ConfigMap", "rollmux-redis-conf")["data"]["redis.conf"]
    (include,) = re.findall(r"^include (\S+)$", conf, re.M)
    pod = one(docs, "StatefulSet", "rollmux-redis")["spec"]["template"]["spec"]
    (init,) = pod["initContainers"]
    assert f"> {include}" in init["command"][-1] and "umask 077" in init["command"][-1]
    assert {m["mountPath"] for m in init["volumeMounts"]} == {str(Path(include).parent)}
    assert str(Path(include).parent) in {m["mountPath"] for m in container(pod, "redis")["volumeMounts"]}


def test_the_admin_token_file_is_the_secret_copied_private(docs):
    pod, c, argv = serve_args(docs)
    _, params = parse_cli(argv[1:])
    vols = {v["name"]: v for v in pod["volumes"]}
    (init,) = pod["initContainers"]
    init_mounts = {m["name"]: m["mountPath"] for m in init["volumeMounts"]}
    (secret_vol,) = [n for n, v in vols.items() if v.get("secret", {}).get("secretName") == "rollmux-admin"]
    token = Path(params["admin_token_file"])
    # The init container installs the Secret's key, mode 0600, owned by the server's user, into a volume
    # the server mounts where --admin-token-file points (rollmux serve refuses a token readable by others).
    cmd = init["command"]
    assert cmd[:7] == ["install", "-m", "0600", "-o", str(pod["securityContext"]["runAsUser"]),
                       "-g", str(pod["securityContext"]["runAsGroup"])]
    assert f"{init_mounts[secret_vol]}/admin.token" in cmd
    target = cmd[cmd.index("-t") + 1]
    (run_vol,) = [n for n, p in init_mounts.items() if p == target]
    assert {m["name"]: m["mountPath"] for m in c["volumeMounts"]}[run_vol] == str(token.parent)
    assert "emptyDir" in vols[run_vol] and "fsGroup" not in pod["securityContext"]
    for flag in ("tls_cert", "tls_key"):
        assert Path(params[flag]).parent == token.parent and f"/secrets/tls/{Path(params[flag]).name}" in cmd


def _containers(doc: dict) -> list[dict]:
    """Every container (and init container) in a document's pod templates."""
    out = []

    def walk(x):
        if isinstance(x, dict):
            for k, v in x.items():
                if k in ("containers", "initContainers") and isinstance(v, list):
                    out.extend(v)
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)
    walk(doc)
    return out


def test_the_systemd_unit_starts_rollmux_serve_with_real_flags():
    unit = configparser.RawConfigParser(strict=True, interpolation=None)
    unit.optionxform = str  # systemd keys are case-sensitive
    unit.read_string(UNIT.read_text())
    svc = unit["Service"]
    argv = shlex.split(svc["ExecStart"])
    assert argv[0].startswith("/") and Path(argv[0]).name == "rollmux"
    command, params = parse_cli(argv[1:])
    assert command == "serve"
    parse_listen(params["listen"])
    state = Path("/var/lib") / svc["StateDirectory"]
    assert Path(params["store"]).parent == state and state == Path(svc["WorkingDirectory"])
    assert str(state) in svc["ReadWritePaths"].split()
    assert svc["RestartPreventExitStatus"] == "2" and svc["KillSignal"] == "SIGTERM"
    assert svc["User"] != "root" and svc["UMask"] == "0077"
    assert unit["Install"]["WantedBy"] == "multi-user.target"


def code_blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of every fenced code block of a Markdown text."""
    blocks, lang, body = [], None, []
    for line in text.splitlines():
        if line.startswith("```"):
            if lang is None:
                lang, body = line[3:].strip(), []
            else:
                blocks.append((lang, "\n".join(body)))
                lang = None
        elif lang is not None:
            body.append(line)
    assert lang is None, "an unclosed code block"
    return blocks


def test_the_guides_rollmux_commands_use_real_flags():
    """Every `rollmux ...` command in the guide's shell blocks parses with the real CLI."""
    shell = [b for lang, b in code_blocks(GUIDE.read_text()) if lang == "bash"]
    lines = [ln.strip() for b in shell for ln in b.replace("\\\n", " ").splitlines()]
    commands = [re.sub(r"^(\w+=\S+\s+)+", "", ln) for ln in lines]  # SSL_CERT_FILE=... rollmux ...
    commands = [c.split(" #")[0] for c in commands if c.startswith("rollmux ")]
    assert len(commands) >= 5, commands
    for cmd in commands:
        try:
            parse_cli(shlex.split(cmd)[1:])
        except TyperException as exc:
            pytest.fail(f"docs/deploy.md: {cmd!r}: {exc}")


def test_the_guides_client_code_calls_real_apis():
    """The guide's Python blocks: the client's and the shim's keyword arguments and methods exist
    (`rollmux.init(...)` makes a JobShim)."""
    import ast
    import inspect

    from rollmux.live.client import HttpPermitClient
    from rollmux.shim import JobShim
    blocks = [b for lang, b in code_blocks(GUIDE.read_text()) if lang == "python"]
    assert len(blocks) >= 2
    classes = {"HttpPermitClient": HttpPermitClient, "JobShim": JobShim}
    made = {}
    for tree in map(ast.parse, blocks):
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)):
                continue
            func = node.value.func
            name = "JobShim" if getattr(func, "attr", None) == "init" else getattr(func, "id", None)
            if name in classes:
                cls = made[node.targets[0].id] = classes[name]
                params = inspect.signature(cls).parameters
                assert {k.arg for k in node.value.keywords} <= set(params), cls
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and getattr(node.value, "id", None) in made:
                assert callable(getattr(made[node.value.id], node.attr, None)), f"{node.value.id}.{node.attr}"
    assert set(made.values()) == set(classes.values())


def test_a_made_up_flag_fails_the_check():
    with pytest.raises(TyperException, match="No such option"):
        parse_cli(["serve", "--journal", "redis://x:6379/0"])
    with pytest.raises(TyperException):
        parse_cli(["serve", "--wait-store", "-1"])


def test_the_probes_use_the_health_routes_the_app_serves(docs):
    _, c, _ = serve_args(docs)
    probes = {p: c[p]["httpGet"]["path"] for p in ("readinessProbe", "livenessProbe")}
    assert probes == {"readinessProbe": "/readyz", "livenessProbe": "/healthz"}
    core = SchedulerCore(default_cluster().model_dump())
    try:
        paths = {r.path for r in create_app(core).routes}
    finally:
        core.shutdown()
    assert set(probes.values()) <= paths


def test_prometheus_scrapes_the_service_with_the_servers_scrape_token(docs):
    pod, c, argv = serve_args(docs)
    _, params = parse_cli(argv[1:])
    monitor, svc = one(docs, "ServiceMonitor", "rollmux"), one(docs, "Service", "rollmux")
    assert monitor["metadata"]["namespace"] == svc["metadata"]["namespace"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    (endpoint,) = monitor["spec"]["endpoints"]
    (port,) = svc["spec"]["ports"]
    assert endpoint["port"] == port["name"] and endpoint["path"] == "/metrics"
    assert endpoint["scheme"] == ("https" if params["tls_cert"] else "http")
    # The bearer it sends is the Secret whose key the init container copies to --metrics-token-file.
    cred = endpoint["authorization"]["credentials"]
    token = Path(params["metrics_token_file"])
    (init,) = pod["initContainers"]
    (vol,) = [v for v in pod["volumes"] if v.get("secret", {}).get("secretName") == cred["name"]]
    mount = {m["name"]: m["mountPath"] for m in init["volumeMounts"]}[vol["name"]]
    assert cred["key"] == token.name and f"{mount}/{token.name}" in init["command"]
    assert init["command"][init["command"].index("-t") + 1] == str(token.parent)
