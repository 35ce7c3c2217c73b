#!/usr/bin/env bash
# The short pass behind bench/results/2026-12-01-llama.md, on a machine with an NVIDIA GPU, in
# about five minutes: the three models and five transformers references (made in parallel), the
# graphsmith-llama checks (programmatic dependent launch on, and one with it off),
# graphsmith-llama bench on both configs (batch 1, 8, 64, eager and graphs, each with and without
# programmatic dependent launch), and, unless QUICK_TORCH=0, one PyTorch contender per config at
# batch 1 (the lean loop on the small config, generate with a static cache compiled with
# reduce-overhead on the 1B config). `run.sh check` and `run.sh bench` are the full passes.
#   bash bench/llama/quick.sh OUTDIR      (GRAPHSMITH_LLAMA: the binary, default gpu-bin/graphsmith-llama)
set -u
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
G=${GRAPHSMITH_LLAMA:-gpu-bin/graphsmith-llama}; M=${LLAMA_MODELS:-/tmp/llama-models}; P=${PYTHON:-python3}
L=$(dirname "$0"); R=${1:?usage: bash bench/llama/quick.sh OUTDIR}
mkdir -p $M $R
t0=$(date +%s); say() { echo "[$(( $(date +%s) - t0 ))s] $*"; }
$P $L/make_model.py --config small --seed 1 --out $M/small-a > $R/make-small-a.log 2>&1 &
$P $L/make_model.py --config small --seed 2 --out $M/small-b > $R/make-small-b.log 2>&1 &
$P $L/make_model.py --config 1b --seed 1 --out $M/1b > $R/make-1b.log 2>&1 &
wait; say "models: $(ls $M | tr '\n' ' ')"
ref() { $P $L/reference.py --model $M/$1 --prompts $L/prompts.json --set $2 --new-tokens 128 --out $M/ref-$1-$2.safetensors > $R/ref-$1-$2.log 2>&1; }
ref small-a single & ref small-a batch8 & ref small-b single & ref 1b single & ref 1b batch8 & wait
say "references: $(ls $M | grep ref | tr '\n' ' ')"
chk() { n=$1; shift; timeout 120 $G check "$@" --json > $R/check-$n.json 2> $R/check-$n.err; rc=$?; say "check $n: exit $rc $(python3 -c "import json,sys; d=json.load(open('$R/check-$n.json')); print('pass', d.get('pass'), 'worst_ratio', [c.get('worst_ratio') for c in d.get('checks',[])], 'hazards', d.get('hazards'), 'swap', {k:d['swap'][k] for k in ('method','switch_ms','nodes_updated')} if d.get('swap') else None, 'recapture_ms', d.get('recapture_ms'))" 2>&1 | cut -c1-400)"; }
chk small-single-eager --model $M/small-a --reference $M/ref-small-a-single.safetensors --mode eager
chk small-single-graphs --model $M/small-a --reference $M/ref-small-a-single.safetensors --mode graphs
chk 1b-single-eager --model $M/1b --reference $M/ref-1b-single.safetensors --mode eager
chk 1b-single-graphs --model $M/1b --reference $M/ref-1b-single.safetensors --mode graphs
chk 1b-single-graphs-cublas --model $M/1b --reference $M/ref-1b-single.safetensors --mode graphs --gemm cublas
chk small-batch8-graphs --model $M/small-a --reference $M/ref-small-a-batch8.safetensors --mode graphs
chk 1b-batch8-graphs --model $M/1b --reference $M/ref-1b-batch8.safetensors --mode graphs
chk small-single-graphs-nopdl --model $M/small-a --reference $M/ref-small-a-single.safetensors --mode graphs --pdl off
chk small-swap-graphs --model $M/small-a --reference $M/ref-small-a-single.safetensors --swap-model $M/small-b --swap-reference $M/ref-small-b-single.safetensors --mode graphs
for c in small-a 1b; do timeout 150 $G bench --model $M/$c --batch 1,8,64 --steps 128 --warmup 16 --mode eager,graphs --pdl auto,off --json > $R/bench-gs-$c.jsonl 2> $R/bench-gs-$c.err; say "gs bench $c: exit $?"; cut -c1-330 $R/bench-gs-$c.jsonl; done
[ "${QUICK_TORCH:-1}" = 0 ] && exit 0
timeout 150 $P $L/torch_bench.py --model $M/small-a --config small --batch 1 --runs 3 --impls lean-compiled > $R/bench-torch-small.jsonl 2> $R/bench-torch-small.err; say "torch small lean: exit $?"; cut -c1-300 $R/bench-torch-small.jsonl
timeout 150 $P $L/torch_bench.py --model $M/1b --config 1b --batch 1 --runs 3 --impls hf-generate-static-compiled > $R/bench-torch-1b.jsonl 2> $R/bench-torch-1b.err; say "torch 1b static-compiled: exit $?"; cut -c1-300 $R/bench-torch-1b.jsonl
