"""A Spark standalone cluster for the tests: a master and workers started from pyspark's own jars
(`spark-class org.apache.spark.deploy.master.Master` / `...worker.Worker`), stopped by pid."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class SparkCluster:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = _free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.processes: list[subprocess.Popen[bytes]] = []
        spark_class = Path(sys.executable).parent / "spark-class"
        if not spark_class.exists():
            raise AssertionError(f"{spark_class} is missing: pip install pyspark (the [spark] extra)")
        self.spark_class = str(spark_class)
        self.env = {
            **os.environ,
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_NO_DAEMONIZE": "1",
            "PYSPARK_PYTHON": sys.executable,
            "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",  # (its REST port: 6066, as ours)
        }

    def _start(self, name: str, *args: str) -> Path:
        log = self.directory / f"{name}.log"
        with open(log, "ab") as out:
            self.processes.append(
                subprocess.Popen(
                    [self.spark_class, *args],
                    env=self.env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
        return log

    def start_master(self) -> None:
        log = self._start(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--webui-port",
            str(_free_port()),
        )
        self._wait(log, "I have been elected leader")

    def start_worker(self, cores: int = 1, memory: str = "2g") -> Path:
        """A worker; its work directory (where its executors' directories appear)."""
        work = self.directory / f"worker-{len(self.processes)}"
        work.mkdir(parents=True, exist_ok=True)
        log = self._start(
            f"worker-{len(self.processes)}",
            "org.apache.spark.deploy.worker.Worker",
            "--host",
            "127.0.0.1",
            "--cores",
            str(cores),
            "--memory",
            memory,
            "--webui-port",
            str(_free_port()),
            "--work-dir",
            str(work),
            self.url,
        )
        self._wait(log, "Successfully registered with master")
        return work

    def _wait(self, log: Path, line: str, timeout_s: float = 90) -> None:
        deadline = time.monotonic() + timeout_s
        while line not in (log.read_text(errors="replace") if log.exists() else ""):
            if self.processes[-1].poll() is not None or time.monotonic() > deadline:
                raise AssertionError(
                    f"{log.name} never said {line!r}: {log.read_text(errors='replace')[-2000:]}"
                )
            time.sleep(0.2)

    def stop(self) -> None:
        for p in self.processes:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=10)
