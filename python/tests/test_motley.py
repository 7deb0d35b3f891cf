"""The motley Python module (python/motley_module.cc), run by /usr/bin/python3 under pytest.

Each function must answer what the matching command prints with --json: the tests compare the two.
"""
import json
import os
import subprocess
import sys

import pytest

import motley

SOURCE = os.environ.get("MOTLEY_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("MOTLEY_BIN", os.path.join(SOURCE, "build", "motley"))


def cli_json(*args):
    out = subprocess.run([BIN, *args, "--json"], capture_output=True, text=True, cwd=SOURCE)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def example(*parts):
    return os.path.join(SOURCE, "examples", *parts)


def test_plan_answers_as_the_command_line_does():
    args = dict(seq_len=128, global_batch_tokens=4096, precision="fp32")
    ours = motley.plan("local-emulated", "llama-1m", compare=True, **args)
    theirs = cli_json("plan", "--cluster", "local-emulated", "--model", "llama-1m", "--seq-len", "128",
                      "--global-batch-tokens", "4096", "--precision", "fp32", "--compare")
    assert ours == theirs
    assert ours["fits_memory"]
    assert len(ours["candidates"]) == 7
    best = min(c["step_time_s"] for c in ours["candidates"] if c["fits_memory"])
    assert ours["step_time_s"] == best


def test_plan_chooses_what_to_rent_as_the_command_line_does():
    args = dict(seq_len=512, global_batch_tokens=262144)
    ours = motley.plan(None, "llama-100m", offers="small-mix", objective="time-within-budget",
                       budget_per_hour=40, tokens=2e9, **args)
    theirs = cli_json("plan", "--offers", "small-mix", "--model", "llama-100m", "--seq-len", "512",
                      "--global-batch-tokens", "262144", "--objective", "time-within-budget",
                      "--budget-per-hour", "40", "--tokens", "2e9")
    assert ours == theirs
    assert ours["money"]["usd_per_hour"] <= 40
    assert [f["chosen"] for f in ours["front"]].count(True) == 1
    assert ours["money"]["job_s"] == pytest.approx(2e9 / ours["money"]["tokens_per_s"])
    with pytest.raises(Exception, match="needs a budget"):
        motley.plan(None, "llama-100m", offers="small-mix", objective="time-within-budget", **args)
    # What a spot interruption loses is taken as the command line takes it.
    slow = motley.plan(None, "llama-100m", offers="small-mix", objective="cost", checkpoint_interval="2h",
                       restart_time="1h", **args)
    assert slow == cli_json("plan", "--offers", "small-mix", "--model", "llama-100m", "--seq-len", "512",
                            "--global-batch-tokens", "262144", "--objective", "cost",
                            "--checkpoint-interval", "2h", "--restart-time", "1h")
    with pytest.raises(Exception, match="restart_time \"soon\": give a duration .* or a run to measure it from"):
        motley.plan(None, "llama-100m", offers="small-mix", restart_time="soon", **args)


def test_plan_judges_islands_over_regions_as_the_command_line_does(tmp_path):
    cluster = tmp_path / "two.toml"
    node = ('[[nodes]]\nname = "{0}"\ndevice = "a100-80gb"\ncount = 2\ninterconnect = "nvlink"\n'
            'nic_bandwidth = "100Gbps"\nregion = "{0}"\n')
    cluster.write_text('name = "two"\n[network]\ninter_region_bandwidth = "1Gbps"\n' +
                       node.format("east") + node.format("west"))
    args = dict(seq_len=512, global_batch_tokens=65536)
    ours = motley.plan(str(cluster), "llama-100m", **args)
    theirs = cli_json("plan", "--cluster", str(cluster), "--model", "llama-100m", "--seq-len", "512",
                      "--global-batch-tokens", "65536")
    assert ours == theirs
    islands = ours["islands"]
    assert len(islands["devices"]) == 2
    assert islands["chosen"] == (islands["tokens_per_s"] * islands["token_efficiency"] > ours["tokens_per_s"])
    assert motley.plan(str(cluster), "llama-100m", islands="2", **args)["islands"]["chosen"]
    assert "islands" not in motley.plan(str(cluster), "llama-100m", islands="off", **args)
    with pytest.raises(motley.MotleyError, match="one a region so far"):
        motley.plan(str(cluster), "llama-100m", islands="3", **args)


def test_a_planned_plan_simulates_to_its_predicted_step():
    r = motley.plan("local-emulated", "llama-1m", seq_len=128, global_batch_tokens=4096, precision="fp32")
    s = motley.simulate(r["plan"])
    assert s["step_time_s"] == pytest.approx(r["step_time_s"], rel=1e-9)
    assert s["global_batch_tokens"] == 4096
    assert len(s["devices"]) == sum(len(g["devices"]) for g in r["groups"])


def test_simulate_answers_as_the_command_line_does_and_stragglers_slow_it():
    plan = example("plans", "local-zorse.toml")
    ours = motley.simulate(plan)
    assert ours == cli_json("simulate", "--plan", plan)
    slow = motley.simulate(plan, stragglers=["1=3"])
    assert slow == cli_json("simulate", "--plan", plan, "--straggler", "1=3")
    assert slow["step_time_s"] > 1.2 * ours["step_time_s"]
    # A plan read as a dict simulates the same as its file.
    assert motley.simulate(motley.load_plan(plan))["step_time_s"] == ours["step_time_s"]


def test_tensor_parallel_plans_carry_their_flextp_mode():
    r = motley.plan("zorse-a", "llama-13b", seq_len=2048, global_batch_tokens=131072, strategy="hexiscale",
                    straggler="4=2")
    assert any(g["tp_degree"] > 1 for g in r["groups"])
    assert r["flextp_mode"] in ("off", "migrate")
    assert r["plan"]["flextp_mode"] == r["flextp_mode"]
    assert set(r["straggler"]["step_time_s_by_mode"]) == {"off", "migrate"}
    assert motley.simulate(r["plan"])["flextp_mode"] == r["flextp_mode"]


def test_files_load_as_describe_says():
    assert motley.load_cluster("zorse-a") == cli_json("describe", "--cluster", "zorse-a")
    assert motley.load_model("llama-7b", seq_len=2048) == cli_json("describe", "--model", "llama-7b",
                                                                   "--seq-len", "2048")
    both = motley.describe(cluster="local-emulated", model="llama-1m")
    assert both == cli_json("describe", "--cluster", "local-emulated", "--model", "llama-1m")
    job = motley.load_job("default")
    assert job["training"]["global_batch_tokens"] == job["training"]["seq_len"] * job["training"]["global_batch_sequences"]
    assert job["cluster"]["name"] == "local-emulated"
    assert job["optimizer"]["lr"] > 0


def test_bad_input_raises_motley_error_naming_the_file_line_and_key(tmp_path):
    bad = tmp_path / "cluster.toml"
    bad.write_text('name = "x"\n[[nodes]]\ndevice = "h100"\ncount = "two"\n')
    with pytest.raises(motley.MotleyError) as e:
        motley.load_cluster(str(bad))
    assert str(bad) + ":4" in str(e.value)
    assert "count" in str(e.value)
    assert issubclass(motley.MotleyError, ValueError)
    with pytest.raises(motley.MotleyError, match="multiple of it"):
        motley.plan("local-emulated", "llama-1m", seq_len=128, global_batch_tokens=4000)
    with pytest.raises(motley.MotleyError, match="strategy"):
        motley.plan("local-emulated", "llama-1m", seq_len=128, global_batch_tokens=4096, strategy="fastest")
    with pytest.raises(motley.MotleyError, match="DEVICE=FACTOR"):
        motley.simulate(example("plans", "local-zorse.toml"), stragglers=["9=2"])
    with pytest.raises(motley.MotleyError):
        motley.simulate({"groups": []})
    # What JSON cannot hold, or no reader would walk, is a MotleyError naming the argument (#48).
    plan = motley.load_plan(example("plans", "local-zorse.toml"))
    for value in (float("nan"), float("inf")):
        with pytest.raises(motley.MotleyError, match="^plan: .*Out of range float"):
            motley.simulate(dict(plan, seq_len=value))
    deep = {}
    for _ in range(100000):
        deep = {"a": deep}
    with pytest.raises(motley.MotleyError, match="^plan: .*nested too deeply"):
        motley.simulate(dict(plan, extra=deep))
    shallow_but_deep = {}
    for _ in range(200):
        shallow_but_deep = {"a": shallow_but_deep}
    with pytest.raises(motley.MotleyError, match="nested more than"):
        motley.simulate(dict(plan, extra=shallow_but_deep))
    with pytest.raises(motley.MotleyError, match="^plan: "):
        motley.simulate(dict(plan, extra=object()))
    with pytest.raises(motley.MotleyError, match="seq_len"):
        motley.simulate(dict(plan, seq_len=2**64 - 1))
    with pytest.raises(motley.MotleyError):
        motley.load_job(str(tmp_path / "missing.toml"))
    # The command line's ranges hold here too (#48): a batch of 2^45 tokens, a sequence of -1, 0 or 2^62.
    with pytest.raises(motley.MotleyError, match="global_batch_tokens 35184372088832: must be between"):
        motley.plan("local-emulated", "llama-1m", seq_len=128, global_batch_tokens=2**45)
    for bad in (-1, 0, 2**62):
        with pytest.raises(motley.MotleyError, match="seq_len"):
            motley.describe(model="llama-1m", seq_len=bad)
        with pytest.raises(motley.MotleyError, match="seq_len"):
            motley.plan("local-emulated", "llama-1m", seq_len=bad, global_batch_tokens=4096)


def test_a_plan_that_cannot_fit_answers_with_its_reason():
    r = motley.plan("local-emulated", "llama-65b", seq_len=2048, global_batch_tokens=2048 * 8)
    assert r["error"]
    assert r["step_time_s"] is None


def test_the_readme_sweep_runs():
    out = subprocess.run([sys.executable, os.path.join(SOURCE, "python", "examples", "sweep_batch.py"),
                          "--cluster", "local-emulated", "--model", "llama-1m", "--seq-len", "128",
                          "--sequences", "8", "32"],
                         capture_output=True, text=True, env=dict(os.environ))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split() == ["sequences", "strategy", "step", "tokens/s"]
    assert [l.split()[0] for l in lines[1:3]] == ["8", "32"]
