"""deploy/ cannot run here (no Docker engine, no cluster): check that it is consistent with the code —
it parses, every variable it sets is one the code reads, images and commands match the CLI."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from scheduler.cli.cli import main as cli_main
from scheduler.kafka.config import ENV_VARS, Settings

pytestmark = pytest.mark.unit

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def k8s_documents() -> list[dict]:
    docs = []
    for path in sorted((DEPLOY / "k8s").glob("*.yaml")):
        docs.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return docs


def compose() -> dict:
    return yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())


def scheduler_services(c: dict) -> dict[str, dict]:
    """The services that run the `scheduler` command (the Spark services run the image's spark-class)."""
    return {
        name: s
        for name, s in c["services"].items()
        if s.get("image", "").startswith("kafka-job-scheduler") and "entrypoint" not in s
    }


def test_every_variable_deploy_sets_is_one_the_code_reads():
    c = compose()
    env_sets = [s["environment"] for s in scheduler_services(c).values()]
    env_sets += [d["data"] for d in k8s_documents() if d["kind"] == "ConfigMap"]
    example = dict(
        line.split("=", 1) for line in (DEPLOY / "worker.env.example").read_text().splitlines()
        if line and not line.startswith("#")
    )  # fmt: skip
    env_sets.append(example)
    for env in env_sets:
        unknown = {k for k in env if k.startswith(("SCHEDULER_", "KAFKA_"))} - set(ENV_VARS)
        assert not unknown, unknown
        Settings(**{ENV_VARS[k]: v for k, v in env.items() if k in ENV_VARS})  # and the values parse
    for d in k8s_documents():
        for container in d.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
            for var in container.get("env", []):
                assert var["name"] in ENV_VARS or var["name"] == "POD_NAME", var


def test_compose_runs_three_kraft_brokers_and_workers_replicate_within_them():
    c = compose()
    brokers = {n: s for n, s in c["services"].items() if s.get("image", "").startswith("apache/kafka")}
    assert len(brokers) == 3
    voters = brokers["kafka-1"]["environment"]["KAFKA_CONTROLLER_QUORUM_VOTERS"].split(",")
    assert sorted(v.split("@")[1].split(":")[0] for v in voters) == sorted(brokers)
    assert {b["environment"]["KAFKA_NODE_ID"] for b in brokers.values()} == {"1", "2", "3"}
    for s in scheduler_services(c).values():
        env = s["environment"]
        assert int(env["SCHEDULER_REPLICATION_FACTOR"]) <= len(brokers)
        assert sorted(h.split(":")[0] for h in env["KAFKA_BOOTSTRAP_SERVERS"].split(",")) == sorted(brokers)
        assert env["SCHEDULER_BROKER_PROFILE"] == "kafka"  # the tansu profile is for the embedded broker only


def test_images_and_commands_match_the_dockerfile_and_the_cli(capsys):
    c = compose()
    services = scheduler_services(c)
    assert {s["image"] for s in services.values()} == {"kafka-job-scheduler:0.1.0"}
    assert {s["build"]["dockerfile"] for s in services.values()} == {"deploy/Dockerfile"}
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    assert 'ENTRYPOINT ["scheduler"]' in dockerfile and "pip install" in dockerfile
    commands = [s["command"] for s in services.values()]
    commands += [
        ctr["args"]
        for d in k8s_documents()
        if d["kind"] == "StatefulSet"
        for ctr in d["spec"]["template"]["spec"]["containers"]
    ]
    assert {tuple(cmd) for cmd in commands} == {("worker",), ("launcher",)}
    for cmd in {tuple(c) for c in commands}:
        with pytest.raises(SystemExit) as exit_:
            cli_main([*cmd, "--help"])  # a subcommand the CLI knows
        assert exit_.value.code == 0
    for d in k8s_documents():
        for ctr in d.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
            assert ctr["image"] == "kafka-job-scheduler:0.1.0"


def test_each_worker_keeps_its_state_on_its_own_volume_and_advertises_a_reachable_url():
    c = compose()
    workers = {n: s for n, s in scheduler_services(c).items() if s["command"] == ["worker"]}
    assert len(workers) >= 2
    volumes = [
        v.split(":")[0] for s in workers.values() for v in s["volumes"] if v.endswith(":/var/lib/scheduler")
    ]
    assert len(set(volumes)) == len(workers)
    assert {s["environment"]["SCHEDULER_WEB_HOST"] for s in workers.values()} == set(workers)
    sts = next(
        d
        for d in k8s_documents()
        if d["kind"] == "StatefulSet" and d["metadata"]["name"] == "scheduler-worker"
    )
    mounts = {
        m["name"]: m["mountPath"] for m in sts["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
    }
    config = next(d for d in k8s_documents() if d["kind"] == "ConfigMap")["data"]
    assert mounts["state"] == config["SCHEDULER_DATA_DIR"]
    assert [t["metadata"]["name"] for t in sts["spec"]["volumeClaimTemplates"]] == ["state"]
    host = next(
        e
        for e in sts["spec"]["template"]["spec"]["containers"][0]["env"]
        if e["name"] == "SCHEDULER_WEB_HOST"
    )
    assert re.fullmatch(r"\$\(POD_NAME\)\.scheduler-workers\..+", host["value"])


def test_services_select_the_workers():
    docs = k8s_documents()
    sts = next(d for d in docs if d["kind"] == "StatefulSet" and d["metadata"]["name"] == "scheduler-worker")
    labels = sts["spec"]["template"]["metadata"]["labels"]
    services = [
        d
        for d in docs
        if d["kind"] == "Service" and d["metadata"]["name"] not in ("spark-master", "scheduler-launcher")
    ]
    assert {s["metadata"]["name"] for s in services} == {"scheduler", "scheduler-workers"}
    for s in services:
        assert s["spec"]["selector"].items() <= labels.items()
    assert sts["spec"]["serviceName"] == "scheduler-workers"
    headless = next(s for s in services if s["metadata"]["name"] == "scheduler-workers")
    assert headless["spec"]["clusterIP"] == "None"


def test_the_launchers_log_server_is_reachable_by_pod_name_through_its_headless_service():
    docs = k8s_documents()
    sts = next(
        d for d in docs if d["kind"] == "StatefulSet" and d["metadata"]["name"] == "scheduler-launcher"
    )
    service = next(
        d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == "scheduler-launcher"
    )
    assert sts["spec"]["serviceName"] == "scheduler-launcher" and service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"].items() <= sts["spec"]["template"]["metadata"]["labels"].items()
    container = sts["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    port = int(env["SCHEDULER_LAUNCHER_LOGS_PORT"])
    assert [p["containerPort"] for p in container["ports"]] == [port] == [service["spec"]["ports"][0]["port"]]
    assert re.fullmatch(r"\$\(SCHEDULER_LAUNCHER_ID\)\.scheduler-launcher\..+", env["SCHEDULER_WEB_HOST"])
    config = next(d for d in docs if d["kind"] == "ConfigMap")["data"]
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert str(Path(config["SCHEDULER_AUTH_TOKENS_FILE"]).parent) in mounts, "its log server needs the tokens"
    launcher = scheduler_services(compose())["launcher"]
    assert any(v.endswith(f":{config['SCHEDULER_AUTH_TOKENS_FILE']}:ro") for v in launcher["volumes"])


def test_auth_is_on_in_every_deployment_with_a_mounted_token_file_that_parses():
    from scheduler.http.auth import parse_tokens

    config = next(d for d in k8s_documents() if d["kind"] == "ConfigMap")["data"]
    workers = {n: s for n, s in scheduler_services(compose()).items() if s["command"] == ["worker"]}
    envs = [config, *(s["environment"] for s in workers.values())]
    for env in envs:
        assert (
            env["SCHEDULER_AUTH"] == "on"
            and env["SCHEDULER_AUTH_TOKENS_FILE"] == "/etc/scheduler/tokens.yaml"
        )
    for s in workers.values():
        assert any(v.endswith(":/etc/scheduler/tokens.yaml:ro") for v in s["volumes"]), s["volumes"]
    sts = next(d for d in k8s_documents() if d["metadata"]["name"] == "scheduler-worker")
    pod = sts["spec"]["template"]["spec"]
    mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "tokens")
    volume = next(v for v in pod["volumes"] if v["name"] == "tokens")
    secret = next(d for d in k8s_documents() if d["kind"] == "Secret")
    assert (
        mount["mountPath"] == "/etc/scheduler"
        and volume["secret"]["secretName"] == secret["metadata"]["name"]
    )
    assert parse_tokens(yaml.safe_load(secret["stringData"]["tokens.yaml"]))
    assert parse_tokens(yaml.safe_load((DEPLOY / "tokens.example.yaml").read_text()))
    example = (DEPLOY / "worker.env.example").read_text()
    assert "SCHEDULER_AUTH=on" in example


def test_the_spark_cluster_runs_the_spark_of_the_pyspark_the_image_installs():
    """Master and workers run pyspark's own jars from the scheduler image, in compose and in k8s; the
    launchers' master is that cluster."""
    spark = {n: s for n, s in compose()["services"].items() if n.startswith("spark-")}
    assert set(spark) == {"spark-master", "spark-worker"}
    for s in spark.values():
        assert s["image"] == "kafka-job-scheduler:0.1.0" and s["entrypoint"] == ["spark-class"]
    deployments = {d["metadata"]["name"]: d for d in k8s_documents() if d["kind"] == "Deployment"}
    for name, cls in (("spark-master", "master.Master"), ("spark-worker", "worker.Worker")):
        [ctr] = deployments[name]["spec"]["template"]["spec"]["containers"]
        assert ctr["command"][:2] == ["spark-class", f"org.apache.spark.deploy.{cls}"]
    config = next(d for d in k8s_documents() if d["kind"] == "ConfigMap")["data"]
    assert config["SCHEDULER_SPARK_MASTER"] == "spark://spark-master:7077"
    assert "pyspark==" in (DEPLOY / "constraints.txt").read_text()  # (the image installs with it)
