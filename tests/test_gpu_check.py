"""scripts/offline_wheels.sh and scripts/gpu_check.sh on CPU: the dry run prints the plan and
checks a real wheel listing (resolved against PyPI); the download itself is a slow test."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
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


def test_listing_holds_what_the_check_needs_and_nothing_the_image_has(listing):
    helper = _helper()
    wheels, image = helper.read_manifest(listing)
    assert set(helper.REQUIRED) <= set(wheels)
    assert "torch" in image and "transformers" in image  # resolved, then left out
    assert not set(helper.image_packages()) & set(wheels)
    assert not set(image) & set(wheels)  # nothing an image package requires either
    assert wheels["vpo"][1] == "vpo-0.1.0-py3-none-any.whl"


def test_dry_run_prints_the_plan_and_checks_the_listing(listing):
    done = _run(SCRIPTS / "gpu_check.sh", "--dry-run", "--wheel-list", listing)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("gpu_check plan")
    for step in ("install", "a-gpu-tests", "b-train", "c-eval", "d-demo"):
        assert any(line.strip().startswith(step) for line in lines), step
    total = next(line for line in lines if line.strip().startswith("total"))
    assert float(total.split()[1]) < 25
    assert f"wheels: listing {listing}:" in done.stdout and "none of the" in done.stdout
    assert "nothing was run" in lines[-1] and "wheels ok" in lines[-1]


def test_dry_run_refuses_a_missing_folder_and_image_packages_in_the_listing(tmp_path, listing):
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
    assert "| install | ok | 0.2 (plan 0.5) | no CUDA use recorded |" in md
    assert "| b-train | failed (exit 1) | 1.5 (plan 3.0) | 3.00 GiB allocated, 5.00 GiB reserved (2 process(es)) |" in md
    assert "| d-demo | timed out | 18.0 (plan 15.0) |" in md


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

    files = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").glob("test_*.py")
                   if "pytest.mark.gpu" in p.read_text())
    assert "tests/test_gpu.py" in files and "tests/test_demo_paper_maze.py" in files
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "gpu", "-rs", *files],
                          capture_output=True, text=True, cwd=ROOT, timeout=600, env=ENV)
    summary = done.stdout.strip().splitlines()[-1]
    if torch.cuda.is_available():
        assert done.returncode == 0, done.stdout[-3000:]
    else:
        assert done.returncode == 0 and " skipped" in summary and "passed" not in summary, summary
        assert int(summary.split(" skipped")[0].split()[-1]) >= 7
        assert "needs a CUDA GPU: torch.cuda.is_available() is False here" in done.stdout
