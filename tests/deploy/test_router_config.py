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

from rps_serve.requests import RequestClass
from rps_serve.triton import protocol as p
from rps_serve.triton.class_metrics import (
    KV_CACHE_USAGE,
    QUEUE_DEPTH,
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
    custom = [_selector(entry["metricSpec"]) for entry in engine["customMetrics"]]
    for metric, labels in [*standard.values(), *custom]:
        assert metric in published, f"{metric} is not published by vllm_model"
        family = published[metric]
        assert family.kind == "gauge", f"{metric} is a {family.kind}; the picker reads gauges"
        matching = [series for series in family.series if labels.items() <= series.labels.items()]
        assert len(matching) == 1, f"{metric}{labels} matches {len(matching)} series"


def test_each_class_profile_scores_the_backlogs_its_class_waits_behind() -> None:
    """A class is served after its own and lighter classes, so its profile scores those backlogs
    (`rps_queue_depth` by class), and the class named in the header picks the profile."""
    config = _load("epp-config.yaml")
    plugins = _plugins(config)
    (engine,) = _one(config, "core-metrics-extractor")["parameters"]["engineConfigs"]
    class_of_attribute = {}
    for entry in engine["customMetrics"]:
        metric, labels = _selector(entry["metricSpec"])
        assert metric == QUEUE_DEPTH
        class_of_attribute[entry["attributeKey"]] = RequestClass.from_label(labels["rps_class"])
    profiles = {profile["name"]: profile for profile in config["schedulingProfiles"]}
    handler = _one(config, "header-profile-handler")["parameters"]
    assert handler["defaultProfile"] in profiles
    for cls in RequestClass:
        refs = [plugins[entry["pluginRef"]] for entry in profiles[cls.label]["plugins"]]
        backlogs = {
            class_of_attribute[plugin["parameters"]["attributeKey"]]
            for plugin in refs
            if plugin["type"] == "endpoint-attribute-scorer"
        }
        assert backlogs == {c for c in RequestClass if c <= cls}, cls.label
        assert {"queue-scorer", "kv-cache-utilization-scorer"} <= {plugin["type"] for plugin in refs}
    assert f"`{handler['headerName']}`" in (CHECKOUT / "docs" / "deploy.md").read_text()


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


def test_the_pool_and_the_scrape_reach_the_replicas_where_they_serve() -> None:
    config = _load("epp-config.yaml")
    assert _one(config, "metrics-data-source")["parameters"]["port"] == SERVED_PORTS["metrics"]
    (engine,) = _one(config, "core-metrics-extractor")["parameters"]["engineConfigs"]
    pod = yaml.safe_load((CHECKOUT / "docker" / "k8s" / "deployment.yaml").read_text())["spec"]["template"]
    assert pod["metadata"]["labels"][ENGINE_LABEL] == engine["name"]
    kustomization = _load("kustomization.yaml")
    (pool,) = [
        doc
        for resource in kustomization["resources"]
        for doc in yaml.safe_load_all((ROUTER / resource).read_text())
    ]
    assert pool["apiVersion"] == "inference.networking.k8s.io/v1" and pool["kind"] == "InferencePool"
    assert pool["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert [port["number"] for port in pool["spec"]["targetPorts"]] == [SERVED_PORTS["http"]]
    (generated,) = kustomization["configMapGenerator"]
    assert generated["files"] == ["epp-config.yaml"]
