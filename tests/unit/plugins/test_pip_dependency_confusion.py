# -*- coding: utf-8 -*-
"""Dependency confusion in the venv kind's torch install (issue 24, finding 8), with real pip against two PEP 503
simple indexes served on 127.0.0.1 by this test:

- "torch index" (runtime_torch_index_url): torch 2.9.0+cu130, the CUDA build the node needs;
- "PyPI" (pip's default index, PIP_INDEX_URL here): vllm 0.11.0 requiring ``torch>=2.9``, torch 2.9.0 (a CPU
  build) and torch 99.0, published there by an attacker.

The install before the fix (``pip install --extra-index-url <torch index> <vllm>``, the argv venv.yml built) takes
the highest torch of both indexes: the attacker's. The fixed sequence, every argv from
``pip_plan.vllm_install_plan`` as the role runs them (probe, torch from the torch index alone, read, constraint,
vLLM), installs the torch index's torch, and the constraint keeps it when a later install is offered a higher one.
Each wheel is built here (zip + METADATA, WHEEL, RECORD); its package says where it came from.

The checkpoint role's tools venv, the same way: a huggingface_hub 2.4.0 wheel that is not PyPI's, in the wheel
directory (or an index), is installed by ``pip install huggingface_hub==2.4.0`` (the argv before the fix) and refused
by the hash lock's install (roles/checkpoint/tasks/head.yml: --require-hashes --no-deps --only-binary=:all: -r).
"""

from __future__ import annotations

import base64
import hashlib
import http.server
import os
import subprocess
import sys
import threading
import urllib.parse
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "collections"))

from ansible_collections.dgxspark.cluster.plugins.module_utils import pip_plan  # noqa: E402


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def build_wheel(dest: Path, name: str, version: str, origin: str, requires=()) -> Path:
    """A pure-Python wheel whose package ``name`` holds ``ORIGIN = origin``."""
    dist_info = "%s-%s.dist-info" % (name, version)
    files = {
        "%s/__init__.py" % name: ("ORIGIN = %r\n" % origin).encode(),
        dist_info + "/METADATA": ("Metadata-Version: 2.1\nName: %s\nVersion: %s\n%s" % (
            name, version, "".join("Requires-Dist: %s\n" % r for r in requires))).encode(),
        dist_info + "/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join("%s,%s,%d\n" % (path, _record_hash(data), len(data)) for path, data in files.items())
    files[dist_info + "/RECORD"] = (record + dist_info + "/RECORD,,\n").encode()
    path = dest / ("%s-%s-py3-none-any.whl" % (name, version))
    with zipfile.ZipFile(path, "w") as archive:
        for member, data in sorted(files.items()):
            info = zipfile.ZipInfo(member, date_time=(2026, 1, 1, 0, 0, 0))
            archive.writestr(info, data)
    return path


def build_index(root: Path, wheels) -> None:
    """A PEP 503 simple index under root/simple/<project>/ linking root/files/<wheel>#sha256=."""
    (root / "files").mkdir(parents=True)
    projects = {}
    for name, version, origin, requires in wheels:
        wheel = build_wheel(root / "files", name, version, origin, requires)
        projects.setdefault(name, []).append(wheel)
    for name, paths in projects.items():
        links = "".join('<a href="/%s/files/%s#sha256=%s">%s</a>\n' % (
            root.name, urllib.parse.quote(p.name), hashlib.sha256(p.read_bytes()).hexdigest(), p.name) for p in paths)
        (root / "simple" / name).mkdir(parents=True)
        (root / "simple" / name / "index.html").write_text("<!DOCTYPE html><html><body>\n%s</body></html>\n" % links)


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def indexes(tmp_path_factory):
    root = tmp_path_factory.mktemp("indexes")
    build_index(root / "torch", [("torch", "2.9.0+cu130", "torch-index", ())])
    build_index(root / "pypi", [("torch", "2.9.0", "pypi-cpu", ()), ("torch", "99.0", "pypi-attacker", ()),
                                ("vllm", "0.11.0", "pypi", ("torch>=2.9",))])
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), lambda *a: _Quiet(*a, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    base = "http://127.0.0.1:%d" % server.server_address[1]
    yield {"torch": base + "/torch/simple", "pypi": base + "/pypi/simple"}
    server.shutdown()


def _env(pypi: str) -> dict:
    """pip's default index is the test's "PyPI"; no configuration file, cache or proxy of this machine's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") and k.lower() not in (
        "http_proxy", "https_proxy", "all_proxy")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_INDEX_URL=pypi, PIP_NO_CACHE_DIR="1", PIP_DISABLE_PIP_VERSION_CHECK="1",
               PIP_NO_INPUT="1", NO_PROXY="127.0.0.1", no_proxy="127.0.0.1")
    return env


def _venv(path: Path) -> str:
    """A venv whose bin/pip is this test's pip run for the venv's interpreter (no ensurepip: fast)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, timeout=60)
    pip = path / "bin" / "pip"
    pip.write_text('#!/bin/sh\nexec "%s" -m pip --python "%s" "$@"\n' % (sys.executable, path / "bin" / "python"))
    pip.chmod(0o755)
    return str(path)


def _run(argv, env, extra_env=None):
    proc = subprocess.run(argv, env=dict(env, **(extra_env or {})), capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, "%s\n%s\n%s" % (argv, proc.stdout[-2000:], proc.stderr[-2000:])
    return proc.stdout


def _torch(venv: str, env) -> tuple:
    """(torch's version, where its files came from, the vLLM's) in the venv."""
    out = _run([venv + "/bin/python", "-c", "import importlib.metadata as m, torch, vllm; "
                "print(m.version('torch'), torch.ORIGIN, vllm.ORIGIN)"], env)
    return tuple(out.split())


def test_the_extra_index_install_takes_the_attackers_torch(indexes, tmp_path):
    """The attack, as the code before the fix ran it: the torch index as an extra index of the vLLM install."""
    venv, env = _venv(tmp_path / "old"), _env(indexes["pypi"])
    _run([venv + "/bin/pip", "install", "--extra-index-url", indexes["torch"], "vllm==0.11.0"], env)
    assert _torch(venv, env) == ("99.0", "pypi-attacker", "pypi")


def test_the_plan_installs_the_torch_index_torch_and_keeps_it(indexes, tmp_path):
    venv, env = _venv(tmp_path / "new"), _env(indexes["pypi"])
    constraints = venv + "/.dgxspark-torch-constraints.txt"

    def plan(report=""):
        return pip_plan.vllm_install_plan(venv, "vllm==0.11.0", [], torch_install=True, torch_index_url=indexes["torch"],
                                          report=report, constraints=constraints)

    report = _run(plan()["probe"], env)                      # the vLLM's requirements (a dry run: nothing installed)
    steps = plan(report)
    assert steps["torch"] == [venv + "/bin/pip", "install", "--index-url", indexes["torch"], "torch>=2.9"]
    _run(steps["torch"], env, steps["torch_env"])
    Path(constraints).write_text(pip_plan.torch_constraints(_run(steps["installed"], env)))
    assert Path(constraints).read_text() == "torch==2.9.0+cu130\n"
    _run(steps["vllm"], env)
    assert _torch(venv, env) == ("2.9.0+cu130", "torch-index", "pypi")

    # A later install offered the attacker's torch again (an upgrade of the vLLM) keeps the pinned one.
    _run([venv + "/bin/pip", "install", "--upgrade", "--constraint", constraints, "vllm", "torch"], env)
    assert _torch(venv, env) == ("2.9.0+cu130", "torch-index", "pypi")


def test_the_hash_lock_refuses_a_huggingface_hub_that_is_not_pypis(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    build_wheel(wheels, "huggingface_hub", "2.4.0", "attacker")
    lines = (REPO / "roles" / "checkpoint" / "files" / "hf-tools-requirements.txt").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("huggingface_hub=="))
    end = next(i for i in range(start, len(lines)) if not lines[i].endswith("\\"))
    block = "\n".join(lines[start:end + 1]) + "\n"    # the lock's huggingface_hub line, its real hashes
    lock = tmp_path / "lock.txt"
    lock.write_text(block)
    assert list(pip_plan.lock_pins(block)) == ["huggingface-hub"]
    env = _env("http://127.0.0.1:9/simple")   # never asked: --no-index
    find_links = ["--no-index", "--find-links", str(wheels)]

    old = _venv(tmp_path / "old")
    _run([old + "/bin/pip", "install", "--disable-pip-version-check", "--quiet"] + find_links + ["huggingface_hub==2.4.0"], env)
    assert _run([old + "/bin/python", "-c", "import huggingface_hub; print(huggingface_hub.ORIGIN)"], env).strip() == "attacker"

    new = _venv(tmp_path / "new")
    argv = ([new + "/bin/pip", "install", "--disable-pip-version-check", "--quiet", "--require-hashes", "--no-deps",
             "--only-binary=:all:"] + find_links + ["-r", str(lock)])
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode != 0 and "DO NOT MATCH THE HASHES" in proc.stderr, proc.stderr[-2000:]
    assert not list((tmp_path / "new" / "lib").glob("python3*/site-packages/huggingface_hub"))
