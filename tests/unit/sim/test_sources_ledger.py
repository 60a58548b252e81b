"""sim/SOURCES.md, the sim's source ledger: every fault, stand-in executable and apt package family has a row.

What the sim cannot source, it must not invent (DEVELOPERS.md): each fault of the ``FAULTS`` table in
sim/spark-sim, each stand-in executable (sim/node/usr/bin, sim/node/usr/sbin, sim/node/usr/lib/spark-sim, the
``vllm`` console script of sim/vllm-standin) and each package family sim/apt-repo/build-repo publishes needs a
row in the ledger whose first column names it in backticks. The lists come from the code, so a new fault,
stand-in or package family without a row fails here (docs/development.md says how to add one).

A package family is a package name with its variable parts replaced: a kernel release (``6.17.0-1014-nvidia``)
by ``<kernel>``, a driver version (``580.159.03``) by ``<version>``, a CUDA release in a name (``13-0``) by
``<cuda>`` and a driver branch (``580``) by ``<branch>``: ``linux-modules-nvidia-580-open-6.17.0-1014-nvidia``
is ``linux-modules-nvidia-<branch>-open-<kernel>``.
"""

from __future__ import annotations

import configparser
import importlib.machinery
import importlib.util
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[3]
SIM = REPO / "sim"
LEDGER = SIM / "SOURCES.md"
CLI = SIM / "spark-sim"
BUILD_REPO = SIM / "apt-repo" / "build-repo"
STANDIN_DIRS = (SIM / "node" / "usr" / "bin", SIM / "node" / "usr" / "sbin", SIM / "node" / "usr" / "lib" / "spark-sim")
VLLM_PYPROJECT = SIM / "vllm-standin" / "pyproject.toml"

CELL_NAME = re.compile(r"`([^`]+)`")
KERNEL = re.compile(r"\d+\.\d+\.\d+-\d+-[a-z][a-z0-9]*")          # 6.17.0-1014-nvidia
DRIVER_VERSION = re.compile(r"(?<![\d.])\d{3}\.\d+(?:\.\d+)?(?![\d.])")   # 580.159.03, 580.142
CUDA_RELEASE = re.compile(r"(?<=-)\d{2}-\d(?=-|$)")                 # cuda-toolkit-13-0
BRANCH = re.compile(r"(?<=-)\d{3}(?=-|$)")                          # nvidia-utils-580


def load_script(path: Path, name: str) -> ModuleType:
    """Import an executable Python script that has no .py suffix (sim/spark-sim, build-repo)."""
    loader = importlib.machinery.SourceFileLoader(name, str(path))
    spec = importlib.util.spec_from_loader(name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def ledger_rows(text: str) -> dict[str, str]:
    """Every name in backticks in the first column of a table row of the ledger -> that row's last column (source)."""
    rows: dict[str, str] = {}
    for line in text.splitlines():
        if not line.startswith("|"):
            continue
        cells = re.split(r"(?<!\\)\|", line.strip().strip("|"))
        first = cells[0].strip()
        if not first or set(first) <= set("-: "):
            continue
        for name in CELL_NAME.findall(first):
            rows[name.strip()] = cells[-1].strip() if len(cells) > 1 else ""
    return rows


def ledger_items(text: str) -> set[str]:
    """Every name in backticks in the first column of a table row of the ledger."""
    return set(ledger_rows(text))


def family(name: str) -> str:
    """A package name with its kernel release, driver version, CUDA release and branch replaced."""
    name = KERNEL.sub("<kernel>", name)
    name = DRIVER_VERSION.sub("<version>", name)
    name = CUDA_RELEASE.sub("<cuda>", name)
    return BRANCH.sub("<branch>", name)


def faults() -> list[str]:
    return sorted(load_script(CLI, "spark_sim_cli_ledger").FAULTS)


def standins() -> list[str]:
    names = [path.name for folder in STANDIN_DIRS for path in sorted(folder.iterdir())
             if path.is_file() and not path.name.startswith(".")]
    # the sparksim package: one stand-in area per module (boot, gpu, hub, rdma, state)
    names += ["sparksim/%s" % path.stem for path in sorted((STANDIN_DIRS[2] / "sparksim").glob("*.py"))
              if path.stem != "__init__"]
    parser = configparser.ConfigParser()
    parser.read_string(re.search(r"(?ms)^\[project\.scripts\]\n(?:(?!^\[).)*", VLLM_PYPROJECT.read_text()).group(0))
    names += list(parser["project.scripts"])
    return names


def package_names() -> list[str]:
    """What build-repo publishes: its all_packages(arch[, form]) for every form, else the Package fields of a real build."""
    module = load_script(BUILD_REPO, "spark_sim_build_repo_ledger")
    forms = sorted(getattr(module, "FORMS", None) or [None])   # the repository forms it builds (NVIDIA's, Ubuntu's)
    try:
        return sorted({pkg.name for form in forms
                       for pkg in (module.all_packages("arm64", form) if form else module.all_packages("arm64"))})
    except (AttributeError, TypeError):
        pass
    with tempfile.TemporaryDirectory(prefix="ledger-apt-") as out:
        subprocess.run([sys.executable, str(BUILD_REPO), out, "--no-sign", "--arch", "arm64"], check=True,
                       capture_output=True, timeout=600)
        index = "".join(path.read_text() for path in Path(out).rglob("Packages"))   # every form's index
    return sorted(set(re.findall(r"(?m)^Package: (\S+)$", index)))


def families() -> list[str]:
    return sorted({family(name) for name in package_names()})


def test_family_replaces_versions_kernels_and_branches():
    assert family("linux-modules-nvidia-580-open-6.17.0-1014-nvidia") == "linux-modules-nvidia-<branch>-open-<kernel>"
    assert family("linux-modules-nvidia-580-open-nvidia-hwe-24.04") == "linux-modules-nvidia-<branch>-open-nvidia-hwe-24.04"
    assert family("nvidia-firmware-580-580.159.03") == "nvidia-firmware-<branch>-<version>"
    assert family("nvidia-driver-pinning-580.173.02") == "nvidia-driver-pinning-<version>"
    assert family("nvidia-driver-pinning-580") == "nvidia-driver-pinning-<branch>"
    assert family("cuda-toolkit-13-0-config-common") == "cuda-toolkit-<cuda>-config-common"
    assert family("cuda-13-3") == "cuda-<cuda>"
    assert family("nvidia-driver-open") == "nvidia-driver-open"
    assert family("linux-image-6.17.0-1026-nvidia") == "linux-image-<kernel>"


def test_ledger_items_reads_first_columns_only():
    text = ("| item | real form | source |\n| --- | --- | --- |\n| `a`, `b` | `c` | `d` |\n"
            "| --- | x | y |\nnot a row `e`\n| `f` | `g \\| h` | |\n")
    assert ledger_items(text) == {"a", "b", "f"}
    assert ledger_rows(text)["a"] == "`d`" and ledger_rows(text)["f"] == ""


def test_the_lists_come_from_the_code():
    assert "throttled-link" in faults() and "kv-block-corruption" in faults()
    assert {"show_gids", "nvidia-smi", "ib_write_bw", "ethtool", "spark-sim-hub", "sparksim/gpu", "vllm"} <= set(standins())
    assert "linux-modules-nvidia-<branch>-open-<kernel>" in families()
    assert "nvidia-kernel-common-<branch>" in families()


@pytest.mark.parametrize("kind, names", [("faults", faults), ("stand-in executables", standins),
                                         ("apt package families", families)], ids=["faults", "standins", "apt"])
def test_every_item_has_a_ledger_row(kind, names):
    rows = ledger_rows(LEDGER.read_text())
    missing = [name for name in names() if not rows.get(name)]
    assert not missing, ("sim/SOURCES.md has no row (or a row with an empty source) for %s %s: add a row whose first "
                         "column names it in backticks, with its real source or 'worst case: <why>' (docs/development.md)"
                         % (kind, ", ".join(missing)))
