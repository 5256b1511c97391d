"""Helpers of scripts/gpu_check.sh: the plan, the wheel-folder and image checks, the step-b model,
the peak-memory hook and the gpu_check.md summary. Standard library only (it runs before the
wheels are installed).

Usage (from gpu_check.sh)::

    python scripts/gpu_check.py plan
    python scripts/gpu_check.py check-wheels --wheels wheels        # or --wheel-list MANIFEST.txt
    python scripts/gpu_check.py check-image
    python scripts/gpu_check.py build-model OUT_DIR
    python scripts/gpu_check.py summarize OUT_DIR
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REQUIRED = ("vpo", "trl", "datasets", "matplotlib", "pytest")
"""What the check imports from the wheel folder (the rest of the folder is what these require)."""
MAX_FOLDER_MB = 60

MODEL = {"hidden": 512, "layers": 8, "heads": 8, "mlp": 1536}
"""Step b's model, built from a config: the paper-maze preset's size (27M parameters)."""
TRAIN = {"steps": 20, "prompts": 8, "generations": 8}
EVAL = {"examples": 100, "pool": 30, "answers": 3, "compare_examples": 4}
BF16_TOLERANCE = 0.1
"""Largest difference of the mean fixed-scalar best@30 over the compared mazes between the bf16
pool on cuda and the fp32 pool on CPU: sampled chains part ways at the first token whose
probabilities round differently, so the pools are compared as statistics, not token by token."""

STEPS = [
    # (name, what, expected minutes, limit minutes)
    ("install", "pip install --no-index --no-deps --target <out>/site <wheels>/*.whl", 0.5, 3),
    ("a-gpu-tests", "pytest -m gpu on the test files that hold gpu tests", 2.0, 4),
    ("b-train", f"vpo train --method vpo --bf16, {TRAIN['steps']} steps x {TRAIN['prompts']} mazes x "
                f"{TRAIN['generations']} rollouts, 9x9 maze, a Llama built from a config (hidden "
                f"{MODEL['hidden']}, {MODEL['layers']} layers, 27M parameters)", 3.0, 5),
    ("c-eval", f"vpo eval --device cuda: {EVAL['examples']} test mazes x pool {EVAL['pool']} (m = "
               f"{EVAL['answers']}), then {EVAL['compare_examples']} mazes on cuda bf16, cuda fp32 and cpu fp32",
     2.0, 4),
    ("d-demo", "vpo demo --preset paper-maze: warm-up on 40,000 random walks, 4 methods x 2 seeds x 125 RL "
               "steps on the paper's 1,000 train mazes, 100 test mazes x 30 answers", 15.0, 18),
]
BUDGET_MINUTES = 25


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def image_packages() -> list[str]:
    """scripts/cuda_image.txt: what a CUDA image is assumed to have."""
    lines = (ROOT / "scripts" / "cuda_image.txt").read_text().splitlines()
    return [_norm(line.strip()) for line in lines if line.strip() and not line.startswith("#")]


def plan() -> int:
    rows = [f"  {name:<12} {expected:>5.1f} min (limit {limit:>2} min)  {what}" for name, what, expected, limit in STEPS]
    total = sum(step[2] for step in STEPS)
    print("gpu_check plan (expected minutes on one H100 80 GB are estimates until a run records them):")
    print("\n".join(rows))
    print(f"  {'total':<12} {total:>5.1f} min (budget {BUDGET_MINUTES} min; a step that fails is recorded and the "
          "next one runs)")
    return 0 if total < BUDGET_MINUTES else 1


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
    """The wheel folder (or only its listing) holds what the check needs and nothing the image has."""
    manifest = listing if listing is not None else (folder / "MANIFEST.txt" if folder else None)
    if manifest is None or not manifest.is_file():
        print(f"wheels: no {manifest or 'MANIFEST.txt'}; run scripts/offline_wheels.sh --out {folder or 'wheels'} "
              "on a machine with internet first")
        return 1
    wheels, image = read_manifest(manifest)
    problems = [f"missing {name} (the check imports it)" for name in REQUIRED if name not in wheels]
    problems += [f"{name} is assumed on the CUDA image, yet in the folder (not by --include)"
                 for name in image_packages() if name in wheels and image.get(name) != "included"]
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
    print(f"wheels: {where}: {len(wheels)} wheels{sized}; has {', '.join(REQUIRED)}; "
          f"none of the {len(image_packages())} image packages")
    return 0


def check_image() -> int:
    """The image's packages are installed and within vpo's pins for them (pyproject's [trl] extra);
    torch sees a GPU. Prints one line each; returns 1 if one is missing or out of range."""
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


def build_model(out: Path) -> int:
    """Step b's checkpoint: the demo's compact 9x9 maze format and a Llama of MODEL's size."""
    from vpo.tasks.maze.format import CompactMazeFormat
    from vpo.models import build_char_tokenizer, build_tiny_llama, count_parameters

    fmt = CompactMazeFormat(max_answers=3)
    tokenizer = build_char_tokenizer(fmt.alphabet(), extra_tokens=fmt.extra_tokens())
    model = build_tiny_llama(tokenizer, max_positions=256, seed=0, **MODEL)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    fmt.save(out, task="maze", task_params={"size": 9, "reward_mode": "linear"})
    print(f"model: {count_parameters(model):,} parameters -> {out}")
    return 0


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


def summarize(out: Path) -> int:
    """gpu_check.md from steps.tsv, the peak files and the steps' outputs: a table to paste into
    docs/gpu.md, then each step's numbers."""
    expected = {name: (what, minutes) for name, what, minutes, _ in STEPS}
    rows, details = [], []
    steps_file = out / "steps.tsv"
    records = [line.split("\t") for line in steps_file.read_text().splitlines()] if steps_file.is_file() else []
    for name, rc, seconds in records:
        peaks = []
        peak_file = out / "peaks" / f"{name}.jsonl"
        if peak_file.is_file():
            peaks = [json.loads(line) for line in peak_file.read_text().splitlines() if line.strip()]
        peak = (f"{max(p['allocated'] for p in peaks) / 2**30:.2f} GiB allocated, "
                f"{max(p['reserved'] for p in peaks) / 2**30:.2f} GiB reserved ({len(peaks)} process(es))"
                if peaks else "no CUDA use recorded")
        status = {"0": "ok", "124": "timed out"}.get(rc, f"failed (exit {rc})")
        what, minutes = expected.get(name, ("", float("nan")))
        rows.append(f"| {name} | {status} | {float(seconds) / 60:.1f} (plan {minutes:.1f}) | {peak} | {what} |")
    details += _eval_numbers(out) + _demo_numbers(out) + _test_numbers(out)
    gpu = (out / "gpu.txt").read_text().strip() if (out / "gpu.txt").is_file() else "unknown GPU"
    total = sum(float(r[2]) for r in records) / 60
    text = [f"# GPU check on {gpu}", "",
            f"`scripts/gpu_check.sh` ({total:.1f} min in all). Peak memory per step: the largest "
            "`torch.cuda.max_memory_allocated` / `_reserved` of any one process of the step.", "",
            "| step | result | minutes | peak GPU memory | what |", "|---|---|---|---|---|", *rows, "", *details]
    (out / "gpu_check.md").write_text("\n".join(text) + "\n")
    print(f"summary: {out / 'gpu_check.md'}")
    return 0


def _eval_numbers(out: Path) -> list[str]:
    lines = []
    runs = {}
    for name in ("cuda", "cuda-bf16-small", "cuda-fp32-small", "cpu-fp32-small"):
        path = out / "eval" / name / "metrics.json"
        if path.is_file():
            runs[name] = json.loads(path.read_text())
    if "cuda" in runs:
        m = runs["cuda"]
        seconds = m["timings"]["sampling and scoring"]
        answers = m["eval"]["examples"] * m["eval"]["pool"]
        lines.append(f"- c: `vpo eval --device cuda` ({m['sampling']['dtype']}, batch {m['sampling']['batch_size']}): "
                     f"{answers} answers in {seconds:.1f} s = {answers / seconds:.1f} answers/s (model load included).")
    scores = {name: _best_at_pool(m) for name, m in runs.items() if name != "cuda"}
    if "cuda-bf16-small" in scores and "cpu-fp32-small" in scores:
        diff = abs(scores["cuda-bf16-small"] - scores["cpu-fp32-small"])
        verdict = "within" if diff <= BF16_TOLERANCE else "OUTSIDE"
        lines.append(f"- c: mean fixed-scalar best@{EVAL['pool']} on {EVAL['compare_examples']} mazes: cuda bf16 "
                     f"{scores['cuda-bf16-small']:.3f}, cuda fp32 {scores.get('cuda-fp32-small', float('nan')):.3f}, "
                     f"cpu fp32 {scores['cpu-fp32-small']:.3f}; bf16 vs cpu fp32 differ by {diff:.3f}, {verdict} the "
                     f"stated tolerance {BF16_TOLERANCE}.")
    return lines


def _best_at_pool(metrics: dict) -> float:
    (entry,) = metrics["methods"].values()
    return float(entry["best_at_k"]["mean"][-1])


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
    sub.add_parser("plan")
    wheels = sub.add_parser("check-wheels")
    wheels.add_argument("--wheels", type=Path)
    wheels.add_argument("--wheel-list", type=Path)
    sub.add_parser("check-image")
    for name in ("build-model", "summarize", "write-hook"):
        sub.add_parser(name).add_argument("folder", type=Path)
    args = parser.parse_args(argv)
    if args.command == "plan":
        return plan()
    if args.command == "check-wheels":
        return check_wheels(args.wheels, args.wheel_list)
    if args.command == "check-image":
        return check_image()
    if args.command == "build-model":
        return build_model(args.folder)
    if args.command == "write-hook":
        return write_hook(args.folder)
    return summarize(args.folder)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
