"""scripts/offline_wheels.sh and scripts/gpu_check.sh on CPU: the dry run prints the plan and
checks a wheel listing (a recorded one; resolving one against the index takes pip 30-60 s of CPU and
the registry's answer, so the fresh listings and the download itself are slow tests)."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts"
ENV = {**os.environ, "PYTHON": sys.executable}


def _helper():
    spec = importlib.util.spec_from_file_location("gpu_check_helper", SCRIPTS / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(*argv, timeout=300):
    return subprocess.run(["bash", *map(str, argv)], capture_output=True, text=True, env=ENV, timeout=timeout,
                          cwd=ROOT)


@pytest.fixture(scope="module")
def listing(tmp_path_factory):
    """A real ``offline_wheels.sh --list`` for this Python (pip resolves against the index, no download)."""
    done = _run(SCRIPTS / "offline_wheels.sh", "--list")
    assert done.returncode == 0, done.stderr[-2000:]
    path = tmp_path_factory.mktemp("wheels") / "MANIFEST.txt"
    path.write_text(done.stdout)
    return path


@pytest.fixture(scope="module")
def recorded_listing():
    """``offline_wheels.sh --list`` as it printed on Python 3.11 (tests/gpu/recorded_listing.txt)."""
    return Path(__file__).with_name("recorded_listing.txt")


@pytest.mark.slow
def test_listing_holds_what_the_check_needs_and_nothing_the_image_has(listing):
    helper = _helper()
    wheels, image = helper.read_manifest(listing)
    assert set(helper.REQUIRED) <= set(wheels)
    assert "torch" in image and "transformers" in image  # resolved, then left out
    assert not set(helper.image_packages()) & set(wheels)
    assert not set(image) & set(wheels)  # nothing an image package requires either
    assert wheels["vpo"][1] == "vpo-0.1.0-py3-none-any.whl"


def test_dry_run_prints_the_plan_and_checks_the_listing(recorded_listing):
    listing = recorded_listing
    done = _run(SCRIPTS / "gpu_check.sh", "--dry-run", "--wheel-list", listing)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("gpu_check plan")
    for step in ("install", "p-pretrained", "a-gpu-tests", "b-train", "c-eval", "d-demo"):
        assert any(line.strip().startswith(step) for line in lines), step
    total = next(line for line in lines if line.strip().startswith("total"))
    assert float(total.split()[1]) < 25
    assert "m-memory" in done.stdout and "lane B" in done.stdout and "lane C" in done.stdout
    assert f"wheels: listing {listing}:" in done.stdout and "none of the" in done.stdout
    assert "nothing was run" in lines[-1] and "wheels ok" in lines[-1]



def test_only_runs_the_named_steps_after_install_with_what_they_need(recorded_listing):
    """--only (a rerun with little device time left): the named steps, by name or letter, after
    install; c brings b (it needs b's checkpoint), m brings b (it probes b's warm-up); a name that
    is no step is refused in one line that lists the steps."""
    def planned(only):
        done = _run(SCRIPTS / "gpu_check.sh", "--dry-run", "--wheel-list", recorded_listing, "--only", only)
        assert done.returncode == 0, done.stdout + done.stderr
        return [line.split()[0] for line in done.stdout.splitlines()[1:] if line.startswith("  ")
                and not line.strip().startswith(("total", "warning"))]

    assert planned("p") == ["install", "p-pretrained"]
    assert planned("c-eval") == ["install", "b-train", "c-eval"]
    assert planned("m,a") == ["install", "a-gpu-tests", "b-train", "m-memory"]
    done = _run(SCRIPTS / "gpu_check.sh", "--dry-run", "--wheel-list", recorded_listing, "--only", "p,x")
    assert done.returncode == 2 and "--only p,x: not a step: x; the steps are p-pretrained, d-demo" in done.stderr

def test_dry_run_refuses_a_missing_folder_and_image_packages_in_the_listing(tmp_path, recorded_listing):
    listing = recorded_listing
    done = _run(SCRIPTS / "gpu_check.sh", "--dry-run", "--wheels", tmp_path / "nowhere")
    assert done.returncode == 1 and "run scripts/offline_wheels.sh" in done.stdout
    bad = tmp_path / "MANIFEST.txt"
    bad.write_text(listing.read_text() + "torch 2.13.0 torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl\n"
                   "trl 1.16.0 trl-1.16.0-cp39-cp39-manylinux_2_28_x86_64.whl\n")
    done = _run(SCRIPTS / "gpu_check.sh", "--dry-run", "--wheel-list", bad)
    assert done.returncode == 1
    assert "torch is assumed on the CUDA image, yet in the folder" in done.stdout
    assert f"does not install on Python {sys.version_info[0]}.{sys.version_info[1]}" in done.stdout
    assert _run(SCRIPTS / "gpu_check.sh", "--wheel-list", bad).returncode == 2  # a real run needs a folder


def test_offline_wheels_checks_its_options():
    done = _run(SCRIPTS / "offline_wheels.sh", "--python", "3.10", "--list")
    assert done.returncode == 2 and "vpo needs Python 3.11 or newer" in done.stderr
    done = _run(SCRIPTS / "offline_wheels.sh", "--platform", "win_amd64", "--list")
    assert done.returncode == 2 and "expected a manylinux tag" in done.stderr
    done = _run(SCRIPTS / "offline_wheels.sh", "--include", "flash-attn", "--list")
    assert done.returncode != 0 and "not in scripts/cuda_image.txt" in done.stderr


def test_summary_table_reads_steps_peaks_and_results(tmp_path):
    helper = _helper()
    (tmp_path / "peaks").mkdir()
    (tmp_path / "logs").mkdir()
    (tmp_path / "steps.tsv").write_text("install\t0\t12.0\nb-train\t1\t90.0\nd-demo\t124\t1080.0\n")
    (tmp_path / "peaks" / "b-train.jsonl").write_text(
        json.dumps({"pid": 1, "argv": [], "allocated": 3 * 2**30, "reserved": 4 * 2**30}) + "\n"
        + json.dumps({"pid": 2, "argv": [], "allocated": 2**30, "reserved": 5 * 2**30}) + "\n")
    (tmp_path / "gpu.txt").write_text("NVIDIA H100 80GB HBM3\n")
    helper.summarize(tmp_path)
    md = (tmp_path / "gpu_check.md").read_text()
    assert md.startswith("# GPU check on NVIDIA H100 80GB HBM3")
    assert "| install | ok | 0.2 (plan 0.4, limit 0.7) | no CUDA use recorded |" in md
    assert ("| b-train | failed (exit 1) | 1.5 (plan 1.5, limit 2.5) | 3.00 GiB allocated, 5.00 GiB reserved "
            "(2 process(es)) |") in md
    assert "| d-demo | timed out | 18.0 (plan " in md
    assert "| c-eval | not run | 0.0 (plan 1.0, limit 1.5) |" in md   # a step not yet recorded


def test_the_demo_steps_peak_is_its_largest_job_not_what_its_processes_held_at_exit(tmp_path):
    """The demo resets each process's peak after every job (logs/cuda_memory.jsonl keeps each job's), so
    the exit hook alone saw 0.08 GiB on the H100 where a job had reserved 1.77 GiB."""
    helper = _helper()
    for sub in ("peaks", "logs", "demo/logs"):
        (tmp_path / sub).mkdir(parents=True)
    (tmp_path / "steps.tsv").write_text("d-demo\t0\t258.0\n")
    (tmp_path / "peaks" / "d-demo.jsonl").write_text(
        "".join(json.dumps({"pid": pid, "argv": [], "allocated": 2**26, "reserved": 2**26}) + "\n" for pid in (7, 8)))
    (tmp_path / "demo" / "logs" / "cuda_memory.jsonl").write_text(
        json.dumps({"job": "rl vpo-s0", "pid": 7, "max_allocated": 2**30, "max_reserved": 2 * 2**30}) + "\n"
        + json.dumps({"job": "pool vpo-s0", "pid": 7, "max_allocated": 2**29, "max_reserved": 2**29}) + "\n")
    (tmp_path / "gpu.txt").write_text("NVIDIA H100 80GB HBM3\n")
    helper.summarize(tmp_path)
    md = (tmp_path / "gpu_check.md").read_text()
    assert "| 1.00 GiB allocated, 2.00 GiB reserved (2 process(es)) |" in md


def test_peak_hook_records_only_processes_that_used_cuda(tmp_path):
    helper = _helper()
    helper.write_hook(tmp_path / "hooks")
    peaks = tmp_path / "peaks.jsonl"
    env = {**ENV, "PYTHONPATH": f"{tmp_path / 'hooks'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "VPO_GPU_PEAK_FILE": str(peaks)}
    subprocess.run([sys.executable, "-c", "import torch; torch.zeros(2)"], check=True, env=env, timeout=120)
    import torch

    if torch.cuda.is_available():
        assert peaks.is_file()
    else:  # torch imported, CUDA never initialised: nothing to record
        assert not peaks.exists()


@pytest.mark.slow
def test_offline_wheels_download_is_small_and_passes_the_dry_run(tmp_path):
    out = tmp_path / "wheels"
    done = _run(SCRIPTS / "offline_wheels.sh", "--out", out, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    size = sum(p.stat().st_size for p in out.glob("*.whl"))
    assert size < 60e6, size
    assert f"{size // 1000000} MB in {out}" in done.stdout
    done = _run(SCRIPTS / "gpu_check.sh", "--dry-run", "--wheels", out)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"wheels: folder {out}:" in done.stdout


def test_gpu_tests_are_collected_and_skip_with_a_reason_without_cuda():
    import torch

    files = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("test_*.py")
                   if "pytest.mark.gpu" in p.read_text())
    assert "tests/gpu/test_gpu.py" in files and "tests/demo/test_demo_paper_maze.py" in files
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "gpu", "-rs", *files],
                          capture_output=True, text=True, cwd=ROOT, timeout=600, env=ENV)
    summary = done.stdout.strip().splitlines()[-1]
    if torch.cuda.is_available():
        assert done.returncode == 0, done.stdout[-3000:]
    else:
        assert done.returncode == 0 and " skipped" in summary and "passed" not in summary, summary
        assert int(summary.split(" skipped")[0].split()[-1]) >= 7
        assert "needs a CUDA GPU: torch.cuda.is_available() is False here" in done.stdout


# ----- the plan, the runner and the verdicts (a check that cannot fail is a defect) -----------------

def test_the_plan_fits_nine_minutes_and_reads_the_preset(tmp_path, monkeypatch):
    helper = _helper()
    steps = helper.plan_steps(tmp_path / "out", tmp_path / "wheels")
    # the pretrained-model demo first (lane A starts with it), then the maze's steps beside it
    assert [s["name"] for s in steps] == ["install", "p-pretrained", "d-demo", "a-gpu-tests", "b-train", "c-eval",
                                          "m-memory"]
    assert helper.critical_minutes(steps, "limit") <= helper.BUDGET_MINUTES == 9
    assert all(s["limit"] > 0 for s in steps)
    pretrained = steps[1]
    assert pretrained["lane"] == "A" and pretrained["limit"] <= 8
    assert "--preset smollm2" in pretrained["shell"] and "all four methods x 2 seeds" in pretrained["what"]
    assert pretrained["expected"] <= pretrained["limit"], pretrained["what"]  # the preset is sized to the limit
    assert helper.MODEL_FILE in pretrained["shell"]
    assert str(tmp_path / "m.gguf") in helper.plan_steps(tmp_path, tmp_path, model=tmp_path / "m.gguf")[1]["shell"]
    demo = next(s for s in steps if s["name"] == "d-demo")
    assert "--preset paper-maze" in demo["shell"] and "all four methods x 2 seeds" in demo["what"]
    # step d's expectation follows vpo.demo.config's PRESETS (maze9's values apply): half the steps, less time
    from vpo.demo.config import PRESETS

    longer, _ = helper.demo_minutes(helper.preset())
    monkeypatch.setitem(PRESETS, "paper-maze", {**PRESETS["paper-maze"], "rl_steps": PRESETS["paper-maze"]["rl_steps"] // 2})
    monkeypatch.setattr(helper, "preset", lambda: {**{f.name: f.default for f in __import__("dataclasses").fields(
        __import__("vpo.demo.config", fromlist=["DemoConfig"]).DemoConfig)}, **PRESETS["paper-maze"]})
    shorter, basis = helper.demo_minutes(helper.preset())
    assert shorter < longer and "4 methods x 2 seeds" in basis


def _fake_plan(tmp_path, steps):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps([{"expected": 0.1, "what": s["name"], **s} for s in steps]))
    return path


def test_a_failed_a_timed_out_and_a_killed_step_are_recorded_and_the_summary_is_written(tmp_path):
    plan = _fake_plan(tmp_path, [
        {"name": "install", "lane": "main", "limit": 0.5, "shell": "true"},
        {"name": "slow", "lane": "A", "limit": 0.05, "shell": "sleep 60"},                 # cut at 3 s
        {"name": "fails", "lane": "B", "limit": 0.5, "shell": "echo broken; exit 3"},
        {"name": "killed", "lane": "B", "limit": 0.5, "shell": "kill -9 $$"},              # e.g. the OOM killer
        {"name": "after", "lane": "B", "limit": 0.5, "shell": "true", "needs": "killed"},
        {"name": "fine", "lane": "B", "limit": 0.5, "shell": "true"},
    ])
    out = tmp_path / "out"
    done = _run(SCRIPTS / "gpu_check.sh", "--plan-file", plan, "--out", out, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.startswith("gpu_check plan")                # the plan is printed first
    md = (out / "gpu_check.md").read_text()
    assert "| slow | timed out |" in md and "| fails | failed (exit 3) |" in md
    assert "| killed | killed (signal 9) |" in md and "| after | skipped |" in md and "| fine | ok |" in md
    assert "2 of 6 steps passed" in md
    assert (out / "logs" / "fails.log").read_text() == "broken\n"


def _alive(group):
    """Processes of process group ``group`` that are running (not zombies waiting for a parent)."""
    alive = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == group and fields[0] != "Z":
            alive.append(int(stat.parent.name))
    return alive


def test_a_killed_check_still_leaves_its_summary(tmp_path):
    """SIGTERM (a run's time limit) ends the running steps' process groups and writes the summary;
    SIGKILL leaves the summary written before the first step and after each."""
    plan = _fake_plan(tmp_path, [
        {"name": "install", "lane": "main", "limit": 0.5, "shell": "true"},
        {"name": "long", "lane": "A", "limit": 5, "shell": "sleep 300 & wait"},
        {"name": "later", "lane": "B", "limit": 5, "shell": "sleep 300"},
    ])
    for sig, status in ((signal.SIGTERM, "| long | killed (signal 15) |"), (signal.SIGKILL, "| long | not run |")):
        out = tmp_path / f"out-{sig}"
        process = subprocess.Popen(["bash", str(SCRIPTS / "gpu_check.sh"), "--plan-file", str(plan), "--out", str(out)],
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=ENV, cwd=ROOT,
                                   start_new_session=sig == signal.SIGKILL)
        deadline = time.monotonic() + 60
        while not ((out / "logs" / "long.pgid").exists() and (out / "logs" / "later.pgid").exists()):
            assert time.monotonic() < deadline and process.poll() is None
            time.sleep(0.2)
        process.send_signal(sig)
        process.wait(timeout=60)
        md = (out / "gpu_check.md").read_text()
        assert status in md and "| install | ok |" in md, md
        groups = [int((out / "logs" / f"{name}.pgid").read_text()) for name in ("long", "later")]
        if sig == signal.SIGTERM:
            assert "| later | killed (signal 15) |" in md
            time.sleep(1)
            assert not [pid for group in groups for pid in _alive(group)]   # the steps' process groups were ended
        else:  # a SIGKILLed check cannot end its steps: end them here, by their recorded groups
            for group in groups:
                os.killpg(group, signal.SIGKILL)


def test_step_b_fails_when_training_does_not_move_the_reward(tmp_path):
    helper = _helper()
    log = tmp_path / "train" / "train_log.jsonl"
    log.parent.mkdir()

    def judged(rewards):
        log.write_text("".join(json.dumps({"step": i + 1, "reward": r}) + "\n" for i, r in enumerate(rewards)))
        return helper.verdict("train", tmp_path)

    assert judged([0.0] * 20) == 1                                 # an untrained model: every reward 0
    assert judged([0.3] * 20) == 1                                 # flat
    assert judged([0.5 - 0.01 * i for i in range(20)]) == 1        # falling
    assert judged([0.2] * 3) == 1                                  # too few steps to judge
    assert judged([0.2 + 0.01 * i for i in range(20)]) == 0        # rising by 0.15
    verdict = json.loads((tmp_path / "verdicts" / "train.json").read_text())
    assert verdict["ok"] and "moved" in verdict["lines"][0]
    helper.summarize(tmp_path)
    assert "- b: reward over the first 5 steps 0.220, the last 5 0.370" in (tmp_path / "gpu_check.md").read_text()


def _eval_metrics(folder, best_1, best_30, texts, examples=20):
    folder.mkdir(parents=True, exist_ok=True)
    curve = [best_1] + [best_30] * 29
    (folder / "metrics.json").write_text(json.dumps({
        "methods": {"x (m=3)": {"best_at_k": {"mean": curve}}}, "timings": {"loading, sampling and scoring": {"wall": 5.0, "cpu": 4.0}},
        "eval": {"examples": examples, "pool": 30}, "sampling": {"dtype": "bfloat16"}}))
    (folder / "pool.npz.jsonl").write_text("".join(json.dumps(row) + "\n" for row in texts))


def test_step_c_fails_beyond_the_bf16_tolerance_or_when_fp32_chains_differ(tmp_path):
    helper = _helper()
    chains = [[f"route {i}-{c}" for c in range(10)] for i in range(20)]
    other = [[f"other {i}-{c}" for c in range(10)] for i in range(20)]

    def judged(bf16, fp32_texts=chains, cpu=(0.30, 0.60)):
        _eval_metrics(tmp_path / "eval" / "cuda", 0.3, 0.6, chains, examples=100)
        _eval_metrics(tmp_path / "eval" / "cuda-bf16", *bf16, chains)
        _eval_metrics(tmp_path / "eval" / "cuda-fp32", *cpu, fp32_texts)
        _eval_metrics(tmp_path / "eval" / "cpu-fp32", *cpu, chains)
        return helper.verdict("eval", tmp_path)

    assert judged((0.28, 0.62)) == 0
    assert judged((0.30, 0.45)) == 1                               # best@30 0.15 apart: outside 0.1
    assert judged((0.12, 0.60)) == 1                               # best@1 (the mean reward) 0.18 apart
    assert judged((0.28, 0.62), fp32_texts=other) == 1             # fp32 on cuda drew other chains than on CPU
    assert judged((0.0, 0.0), cpu=(0.0, 0.0)) == 1                 # all zero: proves nothing
    (tmp_path / "eval" / "cpu-fp32" / "metrics.json").unlink()
    assert helper.verdict("eval", tmp_path) == 1


def test_steps_m_and_d_fail_when_reserved_memory_is_off_its_estimate(tmp_path):
    helper = _helper()
    (tmp_path / "memory").mkdir()

    def probe(name, ratio):
        row = {"batch": 512, "seconds": 3.0, "max_reserved": int(ratio * 2**30), "max_allocated": 2**29,
               "estimate_reserved": 2**30, "reserved_over_estimate": ratio}
        (tmp_path / "memory" / f"{name}.json").write_text(json.dumps(row))

    for name, _, _ in helper.PROBES:
        probe(name, 1.2)
    assert helper.verdict("memory", tmp_path) == 0
    probe("dynamic-default", 20.0)                                 # measured, reported, not held to the ratio
    assert helper.verdict("memory", tmp_path) == 0
    probe("static-expandable", 1.7)                                # vpo's default, outside 1.5x
    assert helper.verdict("memory", tmp_path) == 1
    probe("static-expandable", 0.5)                                # an estimate 2x too high fails too
    assert helper.verdict("memory", tmp_path) == 1
    (tmp_path / "memory" / "static-expandable.json").unlink()
    assert helper.verdict("memory", tmp_path) == 1

    demo = tmp_path / "demo"
    assert helper.verdict("demo", tmp_path) == 1                   # no table
    (demo / "logs").mkdir(parents=True)
    (demo / "metrics.json").write_text(json.dumps({"comparison": {"columns": ["a"], "rows": [["1"]]}}))
    assert helper.verdict("demo", tmp_path) == 1                   # no per-process records
    rows = [{"job": "rl vpo-s0", "pid": 1, "max_reserved": 12 * 2**30, "max_allocated": 10 * 2**30,
             "estimate_reserved": 10 * 2**30, "reserved_over_estimate": 1.2}]
    (demo / "logs" / "cuda_memory.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (demo / "logs" / "rl_wall.json").write_text(json.dumps({"wall": 100.0, "runs": 2, "workers": 2}))
    for i, seconds in enumerate((90.0, 95.0)):
        (demo / "checkpoints" / f"vpo-s{i}").mkdir(parents=True)
        (demo / "checkpoints" / f"vpo-s{i}" / "done.json").write_text(json.dumps({"seconds": seconds}))
    assert helper.verdict("demo", tmp_path) == 0
    lines = json.loads((tmp_path / "verdicts" / "demo.json").read_text())["lines"]
    assert lines[-1] == "d: RL of 2 runs on 2 workers: 100 s wall, the runs' own seconds summed 185: parallel gain 1.85x"
    rows.append({**rows[0], "job": "pool vpo-s0", "max_reserved": 31 * 2**30, "reserved_over_estimate": 3.1})
    (demo / "logs" / "cuda_memory.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert helper.verdict("demo", tmp_path) == 1                   # the first H100 run's 31 GB worker would fail


@pytest.mark.slow
def test_the_listing_for_the_images_python_has_no_cuda_wheel(tmp_path):
    """The CUDA image's Python is 3.12: its listing (resolved against the index, nothing downloaded)
    holds what the check needs and no CUDA wheel (torch, triton, nvidia-*, cuda-*: the image's torch
    has its own, even those it asks for through an extra, cuda-toolkit[cublas,...])."""
    helper = _helper()
    done = _run(SCRIPTS / "offline_wheels.sh", "--python", "3.12", "--list", timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    path = tmp_path / "MANIFEST.txt"
    path.write_text(done.stdout)
    wheels, image = helper.read_manifest(path)
    assert done.stdout.startswith("# vpo GPU-check wheels for Python 3.12")
    assert set(helper.REQUIRED) <= set(wheels)
    assert not [name for name in wheels if helper.CUDA_WHEELS.match(name)], sorted(wheels)
    assert "torch" in image and not set(image) & set(wheels)
    assert all("cp312" in file or "py3" in file or "abi3" in file for _, file in wheels.values()), wheels


def test_the_model_travels_in_two_parts_and_is_checked_when_joined(tmp_path):
    """scripts/carry_model.sh: step p's GGUF is over the 64 MiB a device call carries; split here,
    joined there, its checksum checked (a damaged part is refused)."""
    import shutil

    model = tmp_path / "tiny.gguf"
    model.write_bytes(bytes(range(256)) * 1001)
    root = tmp_path / "repo"
    (root / "scripts").mkdir(parents=True)
    shutil.copy(SCRIPTS / "carry_model.sh", root / "scripts")
    assert _run(root / "scripts" / "carry_model.sh", "split", model).returncode == 0
    parts = [root / "models" / "part1", root / "models" / "part2"]
    assert all(len(list(p.iterdir())) == 2 for p in parts)
    there = tmp_path / "there"
    there.mkdir()
    for part in parts:  # one device call each
        for f in part.iterdir():
            shutil.copy(f, there / f.name)
    done = _run(root / "scripts" / "carry_model.sh", "join", there)
    assert done.returncode == 0 and (there / "tiny.gguf").read_bytes() == model.read_bytes()
    (there / "tiny.gguf").unlink()
    for part in parts:
        for f in part.iterdir():
            shutil.copy(f, there / f.name)
    (there / "tiny.gguf.part2").write_bytes(b"damaged")
    assert _run(root / "scripts" / "carry_model.sh", "join", there).returncode != 0
