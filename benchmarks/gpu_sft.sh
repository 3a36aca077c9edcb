#!/usr/bin/env bash
# One call on a lent GPU machine (about 7 minutes on an H200): the CUDA checks of the SFT step, chat
# SFT at ~1B against TRL's own packing, and GPT's head at the targets with its bound.
#
#   .venv/bin/python benchmarks/trl_sft.py prepare --out .gpu/sft --conversations 1500   # first, on the CPU machine
#   bash benchmarks/gpu_sft.sh OUT_DIR        # on the GPU machine, with TRL/datasets wheels in .whl/
#
# Every stage has its own time limit and writes into OUT_DIR as it goes, so a stage that fails or
# runs out of time leaves the others' results.
set -u
out=${1:?usage: gpu_sft.sh OUT_DIR}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
fi
export PYTHONPATH=src:.:/tmp/site
python3 setup.py -q build_ext --inplace -j 16 >/dev/null 2>&1 || echo "build_ext failed" >>"$out/log.txt"  # gpu.py's batches need the core
log="$out/log.txt"
{
    date -u
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    python3 -c "import inspect, torch, transformers, trl; from torch.nn.attention.varlen import varlen_attn; \
print('torch', torch.__version__, 'transformers', transformers.__version__, 'trl', trl.__version__); \
print('varlen_attn', inspect.signature(varlen_attn))"
} >>"$log" 2>&1
echo "== CUDA tests" >>"$log"
timeout 90 python3 -m pytest -q -p no:cacheprovider -W ignore tests/nn/test_cross_entropy.py \
    "tests/nn/test_hf_padding_free.py::test_grouped_query_attention_on_cuda_adds_no_error_beyond_bf16" 2>&1 | tail -4 >>"$log"
echo "== GPT head at targets" >>"$log"
timeout 130 python3 benchmarks/gpu.py --out "$out/gpu_head.jsonl" --cases head_at_targets --profile-dir "$out" 2>&1 \
    | grep -v -i "warn" | tail -8 >>"$log"
echo "== chat SFT, llama1b" >>"$log"
# SFT_OPTS: the loss check and the profile by default (SFT_OPTS=" " for the timed rounds alone)
timeout 330 python3 benchmarks/trl_sft.py train --data .gpu/sft --model llama1b --rows 8 --rounds 2 --warmup-steps 4 \
    ${SFT_OPTS:---check --profile $out/sft_profiles.txt} --out "$out/trl_sft.json" 2>&1 | grep -v -i "warn" | tail -60 >>"$log"
date -u >>"$log"
