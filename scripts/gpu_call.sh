#!/usr/bin/env bash
# One time-boxed job on a copy of the tree on an accelerator machine (docs/gpu_runbook.md, "A
# time-boxed job on a copy of the tree": the steps and what each writes). Run from the copy's root:
#
#   bash scripts/gpu_call.sh STEP        STEP: bench | cudnn | profile | dtypes | train CONFIG [SEEDS]
#                                              | sweep GRID [sweep.py arguments]
#
# Work that must outlive a call (the data, the partial benchmark file, training workdirs) stays in
# .gpu/ (git-ignored, kept on the machine between jobs). What a call produced goes to
# .gpu/results/STEP/ and comes back as one archive, $OUT/STEP_KIND.tgz (few files to copy back), with its summaries printed
# last, also when the time limit stopped the job's work.
# Environment: LRA_GIT_COMMIT (the commit the copy was made from: a copy without .git cannot say it, and records must
# name their code), KIND (a name for the files, default h100), BUDGET (seconds of work in this
# job, default 540), JOBS (processes at once, default 4), SMOKE=1 (tiny sizes, any machine);
# for sweep: PREPARE (arguments of `lra.data prepare`, run once before the runs, which would each
# build the data), NAME (the sweep's folder, default the grid's name), PART_BYTES (the state archive is split into
# parts of this size, default 15000000, for a copy-back path that limits a file's size).
set -uo pipefail

STEP=${1:-help}
case "$STEP" in
  bench | cudnn | profile | dtypes | train | sweep) ;;
  *) sed -n '2,16p' "$0"; exit 2 ;;
esac
KIND=${KIND:-h100}
BUDGET=${BUDGET:-540}
JOBS=${JOBS:-4}
SMOKE=${SMOKE:-0}
OUT=$(realpath -m "${OUT:-.gpu/out}")
STATE=${STATE:-.gpu}
R=$STATE/results/$STEP
mkdir -p "$OUT" "$R"
export PYTHONUNBUFFERED=1 LRA_DATA_DIR=${LRA_DATA_DIR:-$STATE/data}
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH}
if [ "$SMOKE" != 1 ] && compgen -G ".whl/*.whl" >/dev/null; then  # packages the machine's image lacks (runbook: wheels)
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=$PYTHONPATH:/tmp/site || exit 3
fi
PY=${PY:-python3}
started=$SECONDS
left() { local s=$((BUDGET - (SECONDS - started))); echo $((s > 1 ? s : 1)); }  # timeout 0 would never stop
say() { echo "[gpu_call $STEP $(date -u +%H:%M:%S) +$((SECONDS - started))s] $*"; }

if [ "$SMOKE" = 1 ]; then
  PRESET=smoke; LENGTHS="16 32"; BENCH_SET=(--set batch_size=2 --set model.num_layers=1 --steps 2 --repeats 1
    --matmul-size 128); FAMILIES=(--families softmax convluna); TRAIN_SET=(--config.num_train_steps=12
    --config.eval_every=6 --config.checkpoint_every=6); PROFILE=2:3; DTYPE_STEPS=20; DTYPE_VARIANTS=(--variants
    Transformer ConvLuna-16)
else
  PRESET=paper; LENGTHS="1024 2048 4096"; BENCH_SET=(); FAMILIES=(); TRAIN_SET=(--config.num_train_steps=60
    --config.eval_every=60 --config.checkpoint_every=60); PROFILE=30:10; DTYPE_STEPS=300; DTYPE_VARIANTS=()
fi

COMMIT=$($PY -c "from lra.training.run_files import git_commit; print(git_commit())")
if [ "$COMMIT" = unknown ] && [ "$SMOKE" != 1 ]; then
  echo "error: this copy of the tree has no .git, so the records could not name their code: run with" \
    "LRA_GIT_COMMIT=<the commit you sent> (git rev-parse HEAD where you called from)" >&2
  exit 2
fi

versions() {
  say "commit $COMMIT; $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null \
    || echo no nvidia-smi)"
  $PY -c "import jax, flax, optax; print('jax', jax.__version__, 'flax', flax.__version__, 'optax', optax.__version__, jax.devices())"
}

data() {  # the task's paper-scale data (ListOps: generated, about a minute), once per machine
  $PY -m lra.data prepare listops $([ "$SMOKE" = 1 ] && echo "--max_len 64 --set min_len=8 --set num_train=160 --set num_val=32 --set num_test=32")
}

case "$STEP" in
  bench)  # issue 15: every family x 1K/2K/4K x float32/bfloat16 x 1/5 seeds; resumes across calls
    versions
    timeout -s TERM "$(left)" $PY scripts/bench_training.py steps --lengths $LENGTHS "${FAMILIES[@]}" "${BENCH_SET[@]}" \
      --jobs "$JOBS" --case-timeout 300 --out "$STATE/bench" --name "training_steps_$KIND"
    say "exit $? (124: the budget ran out; call again to go on)"
    cp "$STATE"/bench/training_steps_"$KIND".* "$R"/ 2>/dev/null ;;
  cudnn)  # issue 15: the Transformer's softmax through cuDNN against XLA, bfloat16, no attention dropout
    versions
    for impl in xla cudnn; do
      timeout -s TERM "$(left)" $PY scripts/bench_training.py steps --families softmax --lengths $LENGTHS \
        --dtypes bfloat16 --seeds 1 5 "${BENCH_SET[@]}" --set model.attention_dropout_rate=0.0 \
        --set model.attention_kwargs.implementation=$impl --jobs "$JOBS" --out "$STATE/bench" \
        --name "softmax_${impl}_$KIND"
      cp "$STATE"/bench/softmax_"${impl}"_"$KIND".* "$R"/ 2>/dev/null
    done ;;
  profile)  # issue 15: what limits a paper-scale step: a trace of 10 steps of two families, summarised
    versions; data
    for config in listops_transformer listops_convluna; do
      for dtype in float32 bfloat16; do
        run=$STATE/profile/${config}_$dtype
        timeout -s TERM "$(left)" $PY -m lra.train --config "configs/$config.py:$PRESET" --workdir "$run" --start_over \
          --config.model.dtype=$dtype "${TRAIN_SET[@]}" --profile=$PROFILE | tail -3
        $PY -m lra_lab.bench.profile_summary "$run/profile" > /dev/null
        mkdir -p "$R/${config}_$dtype"
        cp "$run"/profile/profile_summary.* "$run"/result.json "$run"/metrics.jsonl "$R/${config}_$dtype"/ 2>/dev/null
      done
    done
    (cd "$STATE/profile" && tar czf "$OUT/profile_traces_$KIND.tgz" */profile/plugins) ;;  # for Perfetto/xprof
  dtypes)  # issue 15: every family trained DTYPE_STEPS steps in float32 and in bfloat16, same seed, loss curves
    versions; data
    roots=()
    for dtype in float32 bfloat16; do
      root=$STATE/dtypes/$dtype; roots+=("$root")
      $PY scripts/sweep.py lra_families --preset $PRESET --seeds 0 "${DTYPE_VARIANTS[@]}" --root "$root" \
        --set num_train_steps=$DTYPE_STEPS --set eval_every=$DTYPE_STEPS --set checkpoint_every=$DTYPE_STEPS \
        --set log_every=1 --set model.dtype=$dtype --commands
    done > "$STATE/dtypes_commands.sh"
    # one process per run, several at once: each allocates the GPU on demand
    XLA_PYTHON_CLIENT_PREALLOCATE=false timeout -s TERM "$(left)" xargs -P "$JOBS" -I{} sh -c '{} > /dev/null 2>&1 || echo "failed: {}"' \
      < "$STATE/dtypes_commands.sh"
    $PY scripts/compare_curves.py "${roots[@]}" --labels float32 bfloat16 --out "$R" --name "bf16_vs_f32_$KIND" \
      > /dev/null ;;
  train)  # issue 16: CONFIG (e.g. listops_convluna) at paper scale, SEEDS (default 0,1,2,3,4) in one program
    config=${2:?train needs a config name, e.g. listops_convluna}; seeds=${3:-0,1,2,3,4}
    steps=${STEPS:-$([ "$SMOKE" = 1 ] && echo 12 || echo 10000)}
    run=$STATE/runs/${config}_${steps}steps
    versions; data
    timeout -s TERM "$(left)" $PY -m lra.train --config "configs/$config.py:$PRESET" --workdir "$run" \
      --config.seeds="$seeds" --config.num_train_steps="$steps"
    code=$?
    say "lra.train exit $code (143/124: stopped by the budget after saving; call again to resume)"
    $PY scripts/export_runs.py "$run" "$R/${config}_${steps}steps" > /dev/null  # finished seeds' records
    for seed in "$run"/seed*; do  # every seed's metrics so far, finished or not
      mkdir -p "$R/progress/$(basename "$seed")" && cp "$seed"/metrics.jsonl "$seed"/config.json "$R/progress/$(basename "$seed")"/
    done
    if [[ $config == *luna* ]] && [ "$code" = 0 ]; then  # the ConvLuna paper's Figure 1 diagnostics
      $PY -m lra_lab.diagnose memory --workdir "$run"/seed* --out "$R/${config}_${steps}steps_memory" | tail -2
    fi
    du -sh "$run"/seed*/checkpoints | head -2 ;;
  sweep)  # issue 37: a registered study's runs (sweep.py GRID ARGS), each setup's seeds vmapped in one program,
    # JOBS setups at once; a call stopped by its budget resumes in the next when the state archive comes back
    # (unpack it into .gpu/ where you call from and carry .gpu/sweeps)
    grid=${2:?sweep needs a grid, e.g. convluna_appendix}; shift 2
    name=${NAME:-$grid}; root=$STATE/sweeps/$name
    versions
    if [ -n "${PREPARE:-}" ]; then  # shellcheck disable=SC2086 (PREPARE is a list of arguments)
      $PY -m lra.data prepare $PREPARE | tail -2 || exit 3
      grep -h '"train.inputs.npy"' "$LRA_DATA_DIR"/cache/*/meta.json | sed 's/^ */data sha256 /'
    fi
    $PY scripts/sweep.py "$grid" "$@" --group-seeds on --root "$root" --commands > "$STATE/sweep_$name.sh" || exit 2
    say "$(wc -l < "$STATE/sweep_$name.sh") setups, $JOBS at once, $(left) s left"
    mkdir -p "$STATE/logs/$name"
    # one process per setup, several at once: each allocates the GPU on demand; a TERM saves and stops it
    XLA_PYTHON_CLIENT_PREALLOCATE=false timeout -s TERM "$(left)" xargs -P "$JOBS" -I{} sh -c \
      'w=$(echo "{}" | sed "s/.*--workdir=\([^ ]*\).*/\1/"); {} >> "'"$STATE/logs/$name"'/$(basename "$w").log" 2>&1 || echo "exit $? from $w"' \
      < "$STATE/sweep_$name.sh"
    say "runs stopped or done (exit $?; 124: the budget ran out, call again with the state carried)"
    # timeout's TERM reaches every run (its process group), but xargs exits at once and the runs only after
    # saving their checkpoints: wait for them (up to 2 minutes) so that the state packed below is the saved one
    for _ in $(seq 120); do pgrep -f -- "sweeps/$name" > /dev/null || break; sleep 1; done
    for log in "$STATE/logs/$name"/*.log; do echo "$(basename "$log" .log): $(grep -a -E '^step [0-9]+ (train|validation)' "$log" | tail -1)"; done
    $PY scripts/export_runs.py "$root" "$R/$name" > /dev/null  # finished runs' records
    # the state to resume from: every workdir, less the checkpoints of finished seeds
    finished=$(realpath -m "$STATE/finished_checkpoints.txt")  # STATE may be relative (.gpu): used after the cd
    (cd "$STATE" && find "sweeps/$name" -name result.json -printf '%h/checkpoints\n' > "$finished" \
      && tar czf "$OUT/sweep_state_$KIND.tgz" --exclude-from="$finished" "sweeps/$name")
    du -sh "$OUT/sweep_state_$KIND.tgz"
    # parts of PART_BYTES for a copy-back path that limits a file's size (cat the parts to unpack)
    if [ "$(stat -c %s "$OUT/sweep_state_$KIND.tgz")" -gt "${PART_BYTES:=15000000}" ]; then
      split -d -b "$PART_BYTES" "$OUT/sweep_state_$KIND.tgz" "$OUT/sweep_state_$KIND.tgz.part" && rm "$OUT/sweep_state_$KIND.tgz"
      say "state archive in $(ls "$OUT"/sweep_state_"$KIND".tgz.part* | wc -l) parts (copy every part back with the" \
        "records): unpack with cat sweep_state_$KIND.tgz.part* | tar xz -C .gpu"
    fi
    $PY scripts/sweep.py "$grid" "$@" --group-seeds on --root "$root" --list | tail -4 ;;
esac
tar czf "$OUT/${STEP}_$KIND.tgz" -C "$STATE/results" "$STEP"
for f in "$R"/*.md "$R"/*/*.md; do [ -f "$f" ] && { echo "== $f"; cat "$f"; }; done
say "done; $OUT:"; ls -la "$OUT"
