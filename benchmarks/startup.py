"""Time from ``gateway serve`` to the first answered ``/healthz``, with OpenAI-compatible
models only (litellm must not be imported). Usage: python benchmarks/startup.py [--runs N]"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp())
    port = free_port()
    config = tmp / "startup.yaml"
    config.write_text(json.dumps({
        "model_list": [{"model_name": "m", "litellm_params": {
            "model": "openai/m", "api_base": "http://127.0.0.1:9/v1", "api_key": "k"}}],
        "gateway": {"port": port, "log_level": "warning"},
        "sessions": {"data_dir": str(tmp / "data")},
    }))
    gateway = [sys.executable, "-m", "gateway.cli", "serve", "--config", str(config)]
    times = []
    for _ in range(args.runs):
        start = time.perf_counter()
        proc = subprocess.Popen(gateway, stderr=subprocess.DEVNULL)
        try:
            while True:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz",
                                                timeout=1) as r:
                        health = json.loads(r.read())
                    break
                except (urllib.error.URLError, ConnectionError):
                    time.sleep(0.01)
            times.append(time.perf_counter() - start)
        finally:
            proc.terminate()
            proc.wait()
    print(f"serving after {min(times):.2f}s (best of {args.runs}), "
          f"median {sorted(times)[len(times) // 2]:.2f}s; litellm imported: "
          f"{health['litellm_loaded']}")


if __name__ == "__main__":
    main()
