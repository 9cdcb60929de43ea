#!/usr/bin/env bash
# Run the whole collection on a CUDA machine and keep what it showed.
#
# Meant for the device tool's GPU machine, from the repository root, with the wheels of
# nbval, nbclient, ipykernel, ipywidgets and their needs in .whl/ (docs/gpu-verification.md):
#     bash tools/gpu/gpu_verify.sh            # writes under $OUT (default /tmp/gpu-verify)
# It writes: log.txt (machine, versions, each step's verdict and time), nbval.txt (every
# notebook and lab solution under nbval in lax mode: the cells and their asserts run on the GPU
# branches; outputs are not compared, they differ from the stored CPU ones), executed.tar.gz
# (each notebook as it ran here, from tools/gpu/gpu_run_notebooks.py, figures included) and
# probe.txt (tools/gpu/gpu_probe.py: the exact text of each GPU-only message the notebooks quote).
# nbval runs in the repository while the executed copies run in a copy of it (the notebooks
# write scratch files next to themselves); notebook 07 runs last and alone, for its timings.
set -u
OUT=${OUT:-/tmp/gpu-verify}
mkdir -p "$OUT"
log="$OUT/log.txt"
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl >>"$log" 2>&1 || { echo "wheel install failed" >>"$log"; exit 1; }
    export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export LESSONS_WIDGETS=text
unset LESSONS_DEVICE MPLBACKEND
{
    date -u
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
    nvidia-smi | sed -n 3p
    python3 - <<'PY'
import sys, torch
print("python", sys.version.split()[0])
print("torch", torch.__version__, "CUDA", torch.version.cuda, "cuDNN", torch.backends.cudnn.version())
print("GPU", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none",
      "count", torch.cuda.device_count())
import utils; print(utils.environment_report())
PY
} >>"$log" 2>&1

step() {  # step NAME COMMAND...: run it, time it, record its exit status in the log
    local name=$1; shift
    local start=$SECONDS
    "$@"
    local rc=$?
    echo "== $name: rc=$rc in $((SECONDS - start)) s" >>"$log"
}

copy=/tmp/gpu-verify-copy
rm -rf "$copy" && cp -r . "$copy"
everything_but_07=$(ls notebooks/[0-9][0-9]_*.ipynb labs/solutions/[0-9][0-9]_*.ipynb | grep -v '^notebooks/07_')
(cd "$copy" && step executed python3 -m tools.gpu.gpu_run_notebooks /tmp/executed $everything_but_07 \
    >"$OUT/executed.txt" 2>&1) &
step nbval-lax python3 -m pytest --noconftest -o addopts= -p no:cacheprovider \
    --nbval-lax --nbval-current-env --nbval-cell-timeout 300 -n 6 --dist loadfile \
    -q -rfE notebooks labs/solutions >"$OUT/nbval.txt" 2>&1
wait
(cd "$copy" && step executed-07-alone python3 -m tools.gpu.gpu_run_notebooks /tmp/executed \
    notebooks/07_moving_data_fast.ipynb >>"$OUT/executed.txt" 2>&1)
tar czf "$OUT/executed.tar.gz" -C /tmp executed
step probe python3 -m tools.gpu.gpu_probe >"$OUT/probe.txt" 2>&1
cat /tmp/executed/summary.txt >>"$log"
cat "$log"
