"""The llm-d router's Endpoint Picker configuration (docker/k8s/router/) reads what the replicas publish:
every metric it names is a gauge `vllm_model` creates, with exactly one series of the labels it asks
for (the picker takes one series per metric, it does not sum them), and it reaches the replicas where
the image and the manifests serve them. (The picker is Go and is not run here.)"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from rps_serve.triton import protocol as p
from rps_serve.triton.class_metrics import (
    KV_CACHE_USAGE,
    RUNNING_REQUESTS,
    WAITING_REQUESTS,
    ClassMetrics,
)
from tests.checkout import CHECKOUT
from tests.deploy.test_docker_files import SERVED_PORTS
from tests.unit.triton.metrics_recorder import RecordedFamily, RecordingPbUtils

ROUTER = CHECKOUT / "docker" / "k8s" / "router"
CONFIGS = ("epp-config.yaml", "epp-config-static.yaml")
ENGINE_LABEL = "llm-d.ai/engine-type"
# A PromQL instant selector as the picker's engineConfigs take it: name{label="value",...}.
SELECTOR = re.compile(r"^(?P<name>[a-zA-Z_:][\w:]*)(?:\{(?P<labels>[^}]*)\})?$")
LABEL = re.compile(r'^\s*(\w+)\s*=\s*"?([^",]*)"?\s*$')


def _load(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROUTER / name).read_text())
    return loaded


def _plugins(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The configured plugins by name (the type where no name is given, as the picker names them)."""
    return {plugin.get("name", plugin["type"]): plugin for plugin in config["plugins"]}


def _one(config: dict[str, Any], plugin_type: str) -> dict[str, Any]:
    (plugin,) = [plugin for plugin in config["plugins"] if plugin["type"] == plugin_type]
    return plugin


def _selector(spec: str) -> tuple[str, dict[str, str]]:
    match = SELECTOR.match(spec.strip())
    assert match, f"{spec!r} is not a metric selector"
    pairs = [LABEL.match(pair) for pair in (match["labels"] or "").split(",") if pair.strip()]
    assert all(pairs), spec
    return match["name"], {pair[1]: pair[2] for pair in pairs if pair}


@pytest.fixture(scope="module")
def published() -> dict[str, RecordedFamily]:
    """The metric families a replica's `vllm_model` creates, with their kinds and series' labels."""
    pb_utils = RecordingPbUtils()
    ClassMetrics(pb_utils, p.VLLM_MODEL)
    return pb_utils.published


@pytest.mark.parametrize("name", CONFIGS)
def test_every_metric_the_picker_reads_is_one_gauge_series_a_replica_publishes(
    name: str, published: dict[str, RecordedFamily]
) -> None:
    extractor = _one(_load(name), "core-metrics-extractor")["parameters"]
    (engine,) = extractor["engineConfigs"]
    assert extractor["defaultEngine"] == engine["name"]
    standard = {
        key: _selector(engine[key]) for key in ("queuedRequestsSpec", "runningRequestsSpec", "kvUsageSpec")
    }
    assert {key: metric for key, (metric, _) in standard.items()} == {
        "queuedRequestsSpec": WAITING_REQUESTS,
        "runningRequestsSpec": RUNNING_REQUESTS,
        "kvUsageSpec": KV_CACHE_USAGE,
    }
    custom = [_selector(entry["metricSpec"]) for entry in engine.get("customMetrics", [])]
    for metric, labels in [*standard.values(), *custom]:
        assert metric in published, f"{metric} is not published by vllm_model"
        family = published[metric]
        assert family.kind == "gauge", f"{metric} is a {family.kind}; the picker reads gauges"
        matching = [series for series in family.series if labels.items() <= series.labels.items()]
        assert len(matching) == 1, f"{metric}{labels} matches {len(matching)} series"


# The plugin types the configurations may use: Beta in llm-d-router v0.10.0 (cmd/epp/runner), so the
# EPP needs no --allow-experimental-plugins. The class profiles' header-profile-handler and
# endpoint-attribute-scorer (Alpha) were taken out with the profiles.
BETA_PLUGINS = {
    "metrics-data-source",
    "core-metrics-extractor",
    "passthrough-parser",
    "queue-scorer",
    "kv-cache-utilization-scorer",
    "max-score-picker",
    "file-discovery",
}


@pytest.mark.parametrize("name", CONFIGS)
def test_one_profile_picks_by_queue_and_kv_cache_not_by_class(name: str) -> None:
    """docs/deploy.md advises the queue, not the class: one profile (the picker adds its single-profile
    handler), no class header, every plugin Beta."""
    config = _load(name)
    plugins = _plugins(config)
    assert {plugin["type"] for plugin in config["plugins"]} <= BETA_PLUGINS
    (profile,) = config["schedulingProfiles"]
    types = [plugins[entry["pluginRef"]]["type"] for entry in profile["plugins"]]
    assert types == ["queue-scorer", "kv-cache-utilization-scorer", "max-score-picker"]
    assert "x-rps-class" not in (ROUTER / name).read_text()


@pytest.mark.parametrize("name", CONFIGS)
def test_every_reference_names_a_configured_plugin(name: str) -> None:
    config = _load(name)
    plugins = _plugins(config)
    assert len(plugins) == len(config["plugins"]), "two plugins share a name"
    refs = [entry["pluginRef"] for profile in config["schedulingProfiles"] for entry in profile["plugins"]]
    refs += [parser["pluginRef"] for parser in config["requestHandler"]["parsers"]]
    for source in config["dataLayer"]["sources"]:
        refs += [source["pluginRef"], *(extractor["pluginRef"] for extractor in source["extractors"])]
    if "discovery" in config["dataLayer"]:
        refs.append(config["dataLayer"]["discovery"]["pluginRef"])
    assert set(refs) <= set(plugins)
    # The picker adds a default metrics source unless one is referenced by its type's name.
    assert "metrics-data-source" in [source["pluginRef"] for source in config["dataLayer"]["sources"]]


def test_the_static_config_is_the_clusters_with_endpoints_from_a_file() -> None:
    cluster, static = _load("epp-config.yaml"), _load("epp-config-static.yaml")
    discovery = static["dataLayer"].pop("discovery")
    (file_discovery,) = [plugin for plugin in static["plugins"] if plugin["type"] == "file-discovery"]
    static["plugins"].remove(file_discovery)
    assert discovery["pluginRef"] == file_discovery.get("name", "file-discovery")
    assert static == cluster
    endpoints_file = Path(file_discovery["parameters"]["path"])
    endpoints = yaml.safe_load((ROUTER / endpoints_file.name).read_text())["endpoints"]
    (engine,) = _one(cluster, "core-metrics-extractor")["parameters"]["engineConfigs"]
    for endpoint in endpoints:
        assert int(endpoint["port"]) == SERVED_PORTS["http"]
        assert endpoint["labels"][ENGINE_LABEL] == engine["name"]


def _router_resources() -> dict[str, dict[str, Any]]:
    """The documents `kubectl apply -k docker/k8s/router` creates (but the ConfigMap), by kind."""
    documents = [
        doc
        for resource in _load("kustomization.yaml")["resources"]
        for doc in yaml.safe_load_all((ROUTER / resource).read_text())
    ]
    by_kind = {doc["kind"]: doc for doc in documents}
    assert len(by_kind) == len(documents), "one document of each kind"
    return by_kind


def test_the_pool_and_the_scrape_reach_the_replicas_where_they_serve() -> None:
    config = _load("epp-config.yaml")
    assert _one(config, "metrics-data-source")["parameters"]["port"] == SERVED_PORTS["metrics"]
    (engine,) = _one(config, "core-metrics-extractor")["parameters"]["engineConfigs"]
    pod = yaml.safe_load((CHECKOUT / "docker" / "k8s" / "deployment.yaml").read_text())["spec"]["template"]
    assert pod["metadata"]["labels"][ENGINE_LABEL] == engine["name"]
    pool = _router_resources()["InferencePool"]
    assert pool["apiVersion"] == "inference.networking.k8s.io/v1"
    assert pool["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert [port["number"] for port in pool["spec"]["targetPorts"]] == [SERVED_PORTS["http"]]
    (generated,) = _load("kustomization.yaml")["configMapGenerator"]
    assert generated["files"] == ["epp-config.yaml"]


def _args(container: dict[str, Any]) -> dict[str, str]:
    """`--name=value` arguments by name."""
    pairs = [arg.removeprefix("--").split("=", 1) for arg in container["args"]]
    assert all(len(pair) == 2 for pair in pairs), "every argument as --name=value"
    return dict(pairs)


def test_the_picker_runs_on_the_pool_with_the_config_mounted_where_its_args_say() -> None:
    resources = _router_resources()
    pool, deployment, service = resources["InferencePool"], resources["Deployment"], resources["Service"]
    pod = deployment["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    args = _args(container)
    assert container["image"].endswith(":v0.10.0")
    # The pool it picks for, in its own namespace (the NAMESPACE variable, from the pod's).
    assert args["pool-name"] == pool["metadata"]["name"]
    assert args["pool-group"] == pool["apiVersion"].split("/")[0]
    env = {var["name"]: var for var in container["env"]}
    assert args["pool-namespace"] == "$(NAMESPACE)"
    assert env["NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    # The configuration file: the generated ConfigMap's key, at the mount the argument names.
    config_file = Path(args["config-file"])
    (generated,) = _load("kustomization.yaml")["configMapGenerator"]
    assert generated["options"]["disableNameSuffixHash"] is True
    assert config_file.name in generated["files"]
    mounts = {mount["name"]: mount for mount in container["volumeMounts"]}
    (volume,) = [v for v in pod["spec"]["volumes"] if v.get("configMap", {}).get("name") == generated["name"]]
    assert Path(mounts[volume["name"]]["mountPath"]) == config_file.parent
    # Ports: ext-proc where the pool's endpointPickerRef and the Service send the gateway, health where
    # the probes ask, metrics where the Service publishes them.
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert ports == {
        "grpc": int(args["grpc-port"]),
        "grpc-health": int(args["grpc-health-port"]),
        "metrics": int(args["metrics-port"]),
    }
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["grpc"]["port"] == ports["grpc-health"], probe
    picker = pool["spec"]["endpointPickerRef"]
    assert picker["kind"] == "Service" and picker["name"] == service["metadata"]["name"]
    service_ports = {port["port"]: port for port in service["spec"]["ports"]}
    ext_proc = service_ports[picker["port"]["number"]]
    assert ports[ext_proc["targetPort"]] == ports["grpc"] and ext_proc["appProtocol"] == "kubernetes.io/h2c"
    assert {port["targetPort"] for port in service_ports.values()} == {"grpc", "metrics"}
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    assert deployment["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    # No Alpha plugin is configured, so the experimental switch stays off.
    assert "allow-experimental-plugins" not in args


def test_the_picker_may_read_its_pool_and_the_pools_pods() -> None:
    resources = _router_resources()
    pod = resources["Deployment"]["spec"]["template"]
    account = resources["ServiceAccount"]["metadata"]["name"]
    assert pod["spec"]["serviceAccountName"] == account
    binding, role = resources["RoleBinding"], resources["Role"]
    assert [(s["kind"], s["name"]) for s in binding["subjects"]] == [("ServiceAccount", account)]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    granted = {
        (group, resource): set(rule["verbs"])
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    for needed in [("inference.networking.k8s.io", "inferencepools"), ("", "pods")]:
        assert {"get", "list", "watch"} <= granted[needed], needed


def test_the_route_sends_a_gateways_traffic_to_the_pool() -> None:
    resources = _router_resources()
    route, pool = resources["HTTPRoute"], resources["InferencePool"]
    assert route["apiVersion"] == "gateway.networking.k8s.io/v1"
    (parent,) = route["spec"]["parentRefs"]
    assert parent["kind"] == "Gateway"
    (rule,) = route["spec"]["rules"]
    (backend,) = rule["backendRefs"]
    assert (backend["group"], backend["kind"], backend["name"]) == (
        pool["apiVersion"].split("/")[0],
        "InferencePool",
        pool["metadata"]["name"],
    )
    assert rule["matches"] == [{"path": {"type": "PathPrefix", "value": "/"}}]
