#!/usr/bin/env bash
# Download every wheel the GPU check (scripts/gpu_check.sh) needs beyond what a CUDA image has
# (scripts/cuda_image.txt), for a given Python version and platform, into one folder to carry
# to an air-gapped GPU node.
#
#   scripts/offline_wheels.sh [--python 3.11] [--platform manylinux_2_28_x86_64] [--out wheels] [--list]
#                             [--include NAME ...]
#
# What the check needs: vpo's own dependencies, its [trl] extra (TRL, datasets, gguf for step p's
# SmolLM2 file, ...) without tensorboard (the check logs to no tensorboard), matplotlib for
# the demo's plots, pytest for the tests marked gpu, and a wheel of vpo itself. pip resolves all
# of it together with the CUDA image's packages (torch pinned by constraints.txt); the image's
# packages and everything they require are then left out. --list prints that listing
# (MANIFEST.txt: name, version, wheel file) without downloading anything. --include NAME (repeatable)
# moves a package of scripts/cuda_image.txt into the folder, for an image that lacks it.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-python3}
PY_VERSION=$("$PYTHON" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
PLATFORM=manylinux_2_28_x86_64
OUT=wheels
LIST_ONLY=0
INCLUDE=""
while [ $# -gt 0 ]; do
  case "$1" in
    --python) PY_VERSION=${2:?--python needs a version like 3.11}; shift 2 ;;
    --platform) PLATFORM=${2:?--platform needs a platform tag}; shift 2 ;;
    --out) OUT=${2:?--out needs a folder}; shift 2 ;;
    --list) LIST_ONLY=1; shift ;;
    --include) INCLUDE="$INCLUDE ${2:?--include needs a package name from scripts/cuda_image.txt}"; shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "offline_wheels.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
case "$PY_VERSION" in
  3.1[1-9]) ;;
  *) echo "offline_wheels.sh: --python $PY_VERSION: vpo needs Python 3.11 or newer (e.g. --python 3.11)" >&2; exit 2 ;;
esac
case "$PLATFORM" in
  manylinux_2_*_x86_64|manylinux2014_x86_64|manylinux_2_*_aarch64|manylinux2014_aarch64) ;;
  *) echo "offline_wheels.sh: --platform $PLATFORM: expected a manylinux tag, e.g. manylinux_2_28_x86_64" >&2; exit 2 ;;
esac
ABI="cp${PY_VERSION/./}"
case "$PLATFORM" in *aarch64) ARCH=aarch64 ;; *) ARCH=x86_64 ;; esac
# a manylinux_2_N wheel runs on manylinux_2_M for M >= N: offer pip every older tag too
GLIBC=$(echo "$PLATFORM" | sed -n 's/^manylinux_2_\([0-9]*\)_.*/\1/p'); GLIBC=${GLIBC:-17}
TARGET_ARGS=(--only-binary=:all: --python-version "$PY_VERSION" --implementation cp --abi "$ABI" --abi abi3 --abi none)
for minor in $(seq "$GLIBC" -1 5); do TARGET_ARGS+=(--platform "manylinux_2_${minor}_${ARCH}"); done
TARGET_ARGS+=(--platform "manylinux2014_${ARCH}" --platform any)

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
# 1. the requirements: read from pyproject.toml, plus the CUDA image's packages
"$PYTHON" - "$ROOT" "$WORK/requirements.txt" "$INCLUDE" <<'PY'
import sys, tomllib
from pathlib import Path
root, out = Path(sys.argv[1]), Path(sys.argv[2])
image = [line.strip().lower() for line in (root / "scripts" / "cuda_image.txt").read_text().splitlines()
         if line.strip() and not line.startswith("#")]
unknown = sorted(set(sys.argv[3].split()) - set(image))
if unknown:
    sys.exit(f"offline_wheels.sh: --include {' '.join(unknown)}: not in scripts/cuda_image.txt ({', '.join(image)})")
project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
extras = project["optional-dependencies"]
not_needed = {"tensorboard", "hypothesis"}
name = lambda req: req.split(";")[0].split("[")[0].split("=")[0].split("<")[0].split(">")[0].split("!")[0].split("~")[0].strip().lower()
reqs = list(project["dependencies"]) + extras["trl"] + extras["plot"] + extras["dev"]
reqs = [r for r in reqs if name(r) not in not_needed] + [i for i in image if i not in {name(r) for r in reqs}]
out.write_text("\n".join(reqs) + "\n")
PY
# 2. resolve everything for the target Python and platform (metadata only: nothing is downloaded)
"$PYTHON" -m pip install -q --dry-run --ignore-installed --target "$WORK/target" --report "$WORK/report.json" \
  "${TARGET_ARGS[@]}" -c "$ROOT/constraints.txt" -r "$WORK/requirements.txt" 2> >(grep -v "is ignored: it is neither" >&2)
# 3. leave out the image's packages and everything they require
"$PYTHON" - "$ROOT" "$WORK/report.json" "$PY_VERSION" "$WORK/MANIFEST.txt" "$INCLUDE" "$ARCH" <<'PY'
import json, re, sys
from pathlib import Path
try:
    from packaging.requirements import Requirement
except ImportError:  # pip's own copy
    from pip._vendor.packaging.requirements import Requirement
root, report, py, manifest = Path(sys.argv[1]), json.loads(Path(sys.argv[2]).read_text()), sys.argv[3], Path(sys.argv[4])
norm = lambda n: re.sub(r"[-_.]+", "-", n).lower()
dists = {norm(i["metadata"]["name"]): i for i in report["install"]}
included = {norm(n) for n in sys.argv[5].split()}
image = [norm(line.strip()) for line in (root / "scripts" / "cuda_image.txt").read_text().splitlines()
         if line.strip() and not line.startswith("#") and norm(line.strip()) not in included]
machine = "aarch64" if sys.argv[6] == "aarch64" else "x86_64"
env = {"python_version": py, "python_full_version": py + ".0", "sys_platform": "linux", "os_name": "posix",
       "platform_system": "Linux", "platform_machine": machine, "implementation_name": "cpython",
       "platform_python_implementation": "CPython", "extra": ""}
# the image's packages and everything they require, with the extras they ask for: torch asks for
# cuda-toolkit[cublas,cudart,...], whose CUDA wheels are required only under those extras
in_image, seen, todo = set(), set(), [(n, "") for n in image]
while todo:
    n, extra = todo.pop()
    if (n, extra) in seen or n not in dists:
        continue
    seen.add((n, extra))
    in_image.add(n)
    for text in dists[n]["metadata"].get("requires_dist", []):
        req = Requirement(text)
        if req.marker is None or req.marker.evaluate({**env, "extra": extra}):
            todo += [(norm(req.name), "")] + [(norm(req.name), norm(e)) for e in req.extras]
# CUDA builds are the image's whatever pulls them in (its torch has its own): never in the folder
cuda = re.compile(r"^(nvidia-.*|triton|torch|torchvision|torchaudio|cuda-.*)$")
stray = sorted(n for n in set(dists) - in_image if cuda.match(n))
if stray:
    print(f"offline_wheels.sh: left out CUDA wheels that no image package requires: {' '.join(stray)}", file=sys.stderr)
    in_image |= set(stray)
lines = ["# vpo GPU-check wheels for Python " + py + ": name version wheel (scripts/offline_wheels.sh)"]
for n in sorted(set(dists) - in_image):
    lines.append(f"{n} {dists[n]['metadata']['version']} {dists[n]['download_info']['url'].rsplit('/', 1)[-1]}")
lines.append("# assumed on the CUDA image (scripts/cuda_image.txt and what it requires), versions resolved here:")
lines += [f"# image {n} {dists[n]['metadata']['version']}" for n in sorted(in_image)]
lines += [f"# included {n}" for n in sorted(included)]
manifest.write_text("\n".join(lines) + "\n")
PY
VPO_VERSION=$("$PYTHON" -c "import tomllib; print(tomllib.load(open('$ROOT/pyproject.toml','rb'))['project']['version'])")
if [ "$LIST_ONLY" = 1 ]; then
  sed -e "1a vpo $VPO_VERSION vpo-$VPO_VERSION-py3-none-any.whl" "$WORK/MANIFEST.txt"
  exit 0
fi
# 4. download exactly those wheels, and build vpo's own
mkdir -p "$OUT"
grep -v '^#' "$WORK/MANIFEST.txt" | awk '{print $1 "==" $2}' > "$WORK/pins.txt"
"$PYTHON" -m pip download -q --no-deps -d "$OUT" "${TARGET_ARGS[@]}" -r "$WORK/pins.txt" \
  2> >(grep -v "is ignored: it is neither" >&2)
"$PYTHON" -m pip wheel -q --no-deps -w "$OUT" "$ROOT" 2> >(grep -v "is ignored: it is neither" >&2)
sed -e "1a vpo $VPO_VERSION vpo-$VPO_VERSION-py3-none-any.whl" "$WORK/MANIFEST.txt" > "$OUT/MANIFEST.txt"
BYTES=$(cat "$OUT"/*.whl | wc -c)
echo "offline_wheels.sh: $(ls "$OUT"/*.whl | wc -l) wheels, $((BYTES / 1000000)) MB in $OUT (Python $PY_VERSION, $PLATFORM)"
if [ "$BYTES" -gt 60000000 ]; then
  echo "offline_wheels.sh: $OUT holds more than 60 MB of wheels: it would not travel with the repository to a device machine (64 MiB in all)" >&2
  exit 1
fi
