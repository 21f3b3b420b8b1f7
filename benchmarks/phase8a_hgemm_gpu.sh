#!/bin/sh
# Phase 8a on a GPU machine (its python3): the HGEMM ladder validated and timed, then Nsight Compute
# readings of rungs 3 vs 4 (shared-memory bank conflicts) and 5 vs 6 (mma.sync vs wgmma) at 4096^3 bf16.
#   sh benchmarks/phase8a_hgemm_gpu.sh [OUTDIR]      (OUTDIR: where the ncu texts and the log go)
# The ladder's JSON goes to benchmarks/results/phase8a_hgemm-<gpu>.json.
OUTDIR=${1:-benchmarks/results}
mkdir -p "$OUTDIR"
SLUG=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tr 'A-Z' 'a-z' | sed 's/[^a-z0-9]\{1,\}/-/g;s/^-//;s/-$//')
export PYTHONUNBUFFERED=1
timeout 360 python3 benchmarks/phase8a_hgemm.py --resources "$OUTDIR/phase8a_hgemm_resources-$SLUG.json" 2>&1 \
    | tee "$OUTDIR/phase8a_hgemm-$SLUG.log"
SECTIONS="--section SpeedOfLight --section MemoryWorkloadAnalysis_Tables --section ComputeWorkloadAnalysis --section WarpStateStats --section Occupancy --section LaunchStats"
CONFLICTS="sm__sass_l1tex_data_bank_conflicts_pipe_lsu_mem_shared_op_ldsm.sum,sm__sass_l1tex_data_pipe_lsu_wavefronts_mem_shared_op_ldsm.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum"
PIPES="sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_tensor_op_hmma.sum,sm__inst_executed_pipe_tensor_op_gmma.sum"
# rung 5 in the configuration the ladder's tuning chose
R5=$(python3 -c "import json; print(','.join(map(str, json.load(open('benchmarks/results/phase8a_hgemm-$SLUG.json'))['rung5_tuning']['chosen'])))" 2>/dev/null)
for rung in 3 4 5 6; do
    EXTRA=""
    [ "$rung" = 5 ] && [ -n "$R5" ] && EXTRA="--rung5 $R5"
    f="$OUTDIR/phase8a_hgemm_ncu_rung$rung-$SLUG.txt"
    { timeout 90 ncu $SECTIONS --metrics "$CONFLICTS" -k regex:hgemm --launch-skip 1 --launch-count 1 \
          python3 benchmarks/phase8a_hgemm.py --profile $rung 4096 $EXTRA 2>&1
      timeout 90 ncu --metrics "$PIPES" -k regex:hgemm --launch-skip 1 --launch-count 1 \
          python3 benchmarks/phase8a_hgemm.py --profile $rung 4096 $EXTRA 2>&1; } \
        | grep -v -E '^(rung [0-9].*compiled|compiled in)' > "$f" || true
done
