"""validate.yml and benchmark.yml against the serving pair, without a new converge (issue 18).

validate.yml quick on the healthy pair passes every guard; with each of the stand-in's
faults set on the head (`spark-sim fault`), the guard made for it fails naming its
evidence while the others still run and pass, and the play fails naming that guard.
benchmark.yml reads back the stand-in's configured rates (the sim inventory's
runtime_vllm_env) within 5%, writes real PNGs, and its compare mode flags a slow-decode
run against the healthy one. Every fault is cleared again, also when a case fails.
"""

import json
import os
import re
import subprocess
import sys

import ansible_runner
import pytest
import siterun
import yaml

INVENTORY = os.environ.get("DGXSPARK_GUARDS_INVENTORY", siterun.INVENTORY)   # another serving sim, for development
RUNTIME_VARS = os.path.join(siterun.PROJECT, "inventories", "sim", "group_vars", "all", "runtime.yml")
GUARD_OF = {
    "kv-block-corruption": ("guard4-kv-blocks", r"8-way: [1-9]\d* of \d+ blocks corrupt: 8-way doc\d+ block \d+ \(expected \w+, got \w+\)"),
    "soft-logits-alone": ("guard5-margin", r"alone: top logprob -0\.\d+ below -0\.100 \(soft logits\)"),
    "low-acceptance": ("acceptance-canary", r"code acceptance 0\.0\d+ below the floor"),
    "slow-decode": ("decode-rate", r"decode below the floor: 2\d\.\d tok/s"),
}
GUARDS = ["warm-up", "smoke", "guard4-kv-blocks", "guard5-margin", "needle-ladder", "acceptance-canary", "decode-rate",
          "finish-reason"]


def spark_sim(*args):
    env = dict(os.environ, **siterun.envvars())
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    proc = subprocess.run([os.path.join(siterun.PROJECT, "sim", "spark-sim"), "-i", INVENTORY, *args],
                          capture_output=True, text=True, env=env, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc


def play(tmp_path, name, extravars=None):
    private = tmp_path / ("runner-" + name)
    private.mkdir(parents=True, exist_ok=True)
    return ansible_runner.run(private_data_dir=str(private), playbook=os.path.join(siterun.PROJECT, name + ".yml"),
                              inventory=INVENTORY, envvars=siterun.envvars(), extravars=extravars or {}, quiet=True,
                              timeout=900)


def verdict_lines(runner):
    for ev in runner.events:
        res = ev.get("event_data", {}).get("res", {})
        if ev.get("event") == "runner_on_ok" and isinstance(res, dict) and "lines" in res and "verdicts" in res:
            return res["lines"]
    raise AssertionError("no verdicts in the run: %s" % siterun.failure_messages(runner))


def by_guard(lines):
    out = {}
    for line in lines:
        status, _, rest = line.partition(" ")
        guard, _, evidence = rest.partition(": ")
        out[guard] = (status, evidence)
    return out


@pytest.fixture()
def fault_cleanup():
    yield
    spark_sim("fault", "spark-head", "clear")


def test_validate_passes_every_guard_on_the_healthy_pair(tmp_path, fault_cleanup):
    spark_sim("fault", "spark-head", "clear")
    runner = play(tmp_path, "validate")
    verdicts = by_guard(verdict_lines(runner))
    assert list(verdicts) == GUARDS
    assert {g: s for g, (s, _) in verdicts.items() if s != "PASS"} == {}, verdicts
    assert runner.rc == 0, siterun.failure_messages(runner)
    assert siterun.changed_tasks(runner) == []


@pytest.mark.parametrize("fault", list(GUARD_OF))
def test_each_fault_fails_its_guard_naming_the_evidence_and_the_others_run(tmp_path, fault, fault_cleanup):
    guard, evidence = GUARD_OF[fault]
    spark_sim("fault", "spark-head", fault)
    runner = play(tmp_path, "validate")
    verdicts = by_guard(verdict_lines(runner))
    assert list(verdicts) == GUARDS
    assert [g for g, (s, _) in verdicts.items() if s == "FAIL"] == [guard], verdicts
    assert re.search(evidence, verdicts[guard][1]), verdicts[guard]
    assert runner.rc != 0
    messages = siterun.failure_messages(runner)
    assert any("1 of 8 guards failed at level quick: %s" % guard in m for m in messages), messages


def cells(folder):
    with open(os.path.join(folder, "results.json")) as handle:
        return json.load(handle)["cells"]


def report_of(runner):
    for ev in runner.events:
        res = ev.get("event_data", {}).get("res", {})
        if ev.get("event") in ("runner_on_ok", "runner_on_failed") and isinstance(res, dict) and "regressions" in res:
            return res
    raise AssertionError("no benchmark report in the run: %s" % siterun.failure_messages(runner))


def test_benchmark_reads_the_configured_rates_and_compare_flags_slow_decode(tmp_path, fault_cleanup):
    with open(RUNTIME_VARS) as handle:
        env = yaml.safe_load(handle)["runtime_vllm_env"]
    prefill, decode = float(env["VLLM_STANDIN_PREFILL_TOK_S"]), float(env["VLLM_STANDIN_DECODE_TOK_S"])
    spark_sim("fault", "spark-head", "clear")
    results = tmp_path / "results"
    healthy = play(tmp_path, "benchmark", {"benchmark_results_dir": str(results)})
    assert healthy.rc == 0, siterun.failure_messages(healthy)
    folder = report_of(healthy)["folder"]
    assert re.search(r"/\d{8}T\d{6}Z_spark-head_9e165c30e270_vllm-0\.27\.1\+spark\.sim$", folder), folder
    for cell in cells(folder):
        assert abs(cell["decode_tok_s"]["median"] / decode - 1) <= 0.05, cell
        if cell["concurrency"] == 1 and cell["prompt_tokens"] == max(c["prompt_tokens"] for c in cells(folder)):
            assert abs(cell["prefill_tok_s"]["median"] / prefill - 1) <= 0.05, cell
    for png in ("decode_vs_context.png", "ttft_vs_prompt.png"):
        with open(os.path.join(folder, png), "rb") as handle:
            data = handle.read()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000, png
    assert os.path.isfile(os.path.join(folder, "results.md"))

    spark_sim("fault", "spark-head", "slow-decode")
    slow = play(tmp_path, "benchmark", {"benchmark_results_dir": str(results), "benchmark_baseline": folder,
                                        "benchmark_prompt_lengths": [1024], "benchmark_concurrency": [1],
                                        "benchmark_repeats": 1})
    report = report_of(slow)
    assert slow.rc != 0
    assert any(line.startswith("REGRESSION decode_tok_s at 1024 tokens x 1") for line in report["lines"]), report["lines"]
    assert os.path.isfile(os.path.join(report["folder"], "compare.md"))
    same = play(tmp_path, "benchmark", {"benchmark_mode": "compare", "benchmark_baseline": folder,
                                        "benchmark_candidate": folder})
    assert same.rc == 0 and report_of(same)["regressions"] == [], siterun.failure_messages(same)
