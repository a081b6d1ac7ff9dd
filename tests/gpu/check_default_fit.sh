#!/usr/bin/env bash
# The default profile (data/device_profiles/h200.toml) must be what `harness calibrate` fits to the
# committed measurements (data/measurements/calibration.toml) from the datasheet figures, and the
# held-out agreement must not fall below what data/measurements/calibration_expected.txt allows.
# A change to the simulator, the calibration or the data that moves either fails here: re-fit
# (`harness calibrate --out data/device_profiles/h200.toml`, then restore the comments) and say why.
set -euo pipefail
bin=$1
src=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$bin/harness" calibrate --out "$out/fit.toml" --report "$out/report.md" --check \
  --expect "$src/data/measurements/calibration_expected.txt" >/dev/null
# Same figures (comments, number spelling and the name aside): every key of the fit has the value the
# default profile gives it, so the two judge every plan alike.
python3 - "$out/fit.toml" "$src/data/device_profiles/h200.toml" <<'PY'
import sys, tomllib

def flat(table, prefix=""):
    out = {}
    for key, value in table.items():
        if isinstance(value, dict):
            out.update(flat(value, prefix + key + "."))
        else:
            out[prefix + key] = value
    return out

with open(sys.argv[1], "rb") as f:
    fit = flat(tomllib.load(f))
with open(sys.argv[2], "rb") as f:
    default = flat(tomllib.load(f))
fit.pop("device.name", None)
default.pop("device.name", None)
differ = []
for key in sorted(set(fit) | set(default)):
    a, b = fit.get(key), default.get(key)
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (a, b))
    if (float(a) != float(b)) if numbers else (a != b):
        differ.append(f"  {key}: fit {a!r}, data/device_profiles/h200.toml {b!r}")
if differ:
    print("data/device_profiles/h200.toml is no longer the fit of the committed measurements: re-fit it")
    print("\n".join(differ))
    sys.exit(1)
PY
echo "h200.toml is the fit of the committed measurements; held-out goals hold as expected"
