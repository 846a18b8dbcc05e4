#!/usr/bin/env bash
# A table of bad inputs run through the ptxlab command line: each case gives the exit code
# and a piece of the message it must print. Classes: PTX, data, flags, paths, checkpoints,
# output, contracts and PTX limits. Needs no GPU and no MNIST. ctest runs it as "cpu:cli: bad inputs" (also under ASan,
# where any sanitizer report fails the case).
#
#   tests/cli/bad_inputs.sh PTXLAB_BINARY SOURCE_DIR
set -u
ptxlab=${1:?usage: bad_inputs.sh PTXLAB_BINARY SOURCE_DIR}
src=${2:?usage: bad_inputs.sh PTXLAB_BINARY SOURCE_DIR}
case "$ptxlab" in /*) ;; *) ptxlab="$(pwd)/$ptxlab" ;; esac   # some cases run it from another directory
t=$(mktemp -d /tmp/ptxlab-bad-inputs-XXXXXX)
trap 'chmod -R u+rwx "$t" 2>/dev/null; rm -rf "$t"' EXIT
fails=0 passes=0 skips=0
nogpu="PTXLAB_LIBCUDA=/nonexistent/libcuda.so.1"   # proves a check happens before looking for a GPU

# check NAME CODE SUBSTRING OUTPUT_FILE ACTUAL_CODE
judge() {
  local name=$1 want=$2 needle=$3 out=$4 got=$5
  if [ "$got" = 124 ]; then
    echo "FAIL  $name: timed out (hung?)"; fails=$((fails + 1)); return
  fi
  if grep -qE 'Sanitizer|runtime error:' "$out"; then
    echo "FAIL  $name: sanitizer report"; sed 's/^/      | /' "$out" | head -40; fails=$((fails + 1)); return
  fi
  if [ "$got" != "$want" ] || { [ -n "$needle" ] && ! grep -qF -- "$needle" "$out"; }; then
    echo "FAIL  $name: exit $got (want $want), message must contain: $needle"
    sed 's/^/      | /' "$out" | head -20; fails=$((fails + 1)); return
  fi
  echo "ok    $name"; passes=$((passes + 1))
}

# expect NAME CODE SUBSTRING COMMAND...: stdout and stderr together.
expect() {
  local name=$1 want=$2 needle=$3; shift 3
  timeout 120 env "$@" >"$t/out" 2>&1; local got=$?
  judge "$name" "$want" "$needle" "$t/out" "$got"
}
# expect_stderr NAME CODE SUBSTRING COMMAND...: stderr only, stdout to /dev/null.
expect_stderr() {
  local name=$1 want=$2 needle=$3; shift 3
  timeout 120 env "$@" >/dev/null 2>"$t/out"; local got=$?
  judge "$name" "$want" "$needle" "$t/out" "$got"
}
# expect_full NAME CODE SUBSTRING COMMAND...: stdout is /dev/full (every write fails).
expect_full() {
  local name=$1 want=$2 needle=$3; shift 3
  if [ ! -w /dev/full ]; then echo "skip  $name: no /dev/full"; skips=$((skips + 1)); return; fi
  timeout 120 env "$@" >/dev/full 2>"$t/out"; local got=$?
  judge "$name" "$want" "$needle" "$t/out" "$got"
}
# expect_gpu NAME CODE SUBSTRING COMMAND...: as expect, but a machine without a GPU answers 3 first.
expect_gpu() {
  local name=$1 want=$2 needle=$3; shift 3
  timeout 120 env "$@" >"$t/out" 2>&1; local got=$?
  if [ "$got" = 3 ] && grep -q 'needs an NVIDIA GPU' "$t/out"; then
    echo "skip  $name: no GPU here (the command looks for one first)"; skips=$((skips + 1)); return
  fi
  judge "$name" "$want" "$needle" "$t/out" "$got"
}

# ---- inputs -------------------------------------------------------------------
header=$'.version 8.0\n.target sm_90\n.address_size 64\n'
kernel=$'.visible .entry k()\n{\n    ret;\n}\n'
printf '%s%s' "$header" "$kernel" >"$t/good.ptx"
printf '%s' "$header" >"$t/header_only.ptx"
printf '%s.visible .func f()\n{\n    ret;\n}\n' "$header" >"$t/func_only.ptx"
printf '.target sm_90\n.address_size 64\n%s' "$kernel" >"$t/no_version.ptx"
printf '\xEF\xBB\xBF%s%s' "$header" "$kernel" >"$t/bom.ptx"
printf '%s// the \xCE\xB3 of Higham\n%s' "$header" "$kernel" >"$t/gamma.ptx"
{ printf '%s// ' "$header"; head -c 5000000 /dev/zero | tr '\0' x; printf '\n%s' "$kernel"; } >"$t/long_line.ptx"
{ printf '%s.visible .entry k(' "$header"; seq 0 299999 | sed 's/^/.param .u32 p/' | paste -sd, -; printf ')\n{\nret;\n}\n'; } \
  >"$t/long_params.ptx"
: >"$t/empty.ptx"
printf '\x7fELF\x02\x01\x01\x00' >"$t/binary.ptx"
mkdir "$t/dir.ptx" "$t/ptxdir"
mkfifo "$t/fifo.ptx"
cp "$src/ptx/mean.ptx" "$t/mine.ptx"
cp "$src/ptx/gather.ptx" "$t/ptxdir/gather.ptx"
printf '%s' "$header" >"$t/unreadable.ptx"; chmod 000 "$t/unreadable.ptx"

# A tiny valid dataset (2 images of 2x2), and broken copies of it.
mkdata() {
  mkdir -p "$1"
  for s in train t10k; do
    printf '\x00\x00\x08\x03\x00\x00\x00\x02\x00\x00\x00\x02\x00\x00\x00\x02\x00\x40\x80\xff\x10\x20\x30\x40' \
      >"$1/$s-images-idx3-ubyte"
    printf '\x00\x00\x08\x01\x00\x00\x00\x02\x01\x07' >"$1/$s-labels-idx1-ubyte"
  done
}
mkdata "$t/data"
mkdata "$t/data_gz_differs"
printf '\x00\x00\x08\x01\x00\x00\x00\x02\x01\x08' | gzip -c >"$t/data_gz_differs/train-labels-idx1-ubyte.gz"
mkdata "$t/data_gz_same"
gzip -c "$t/data_gz_same/t10k-labels-idx1-ubyte" >"$t/data_gz_same/t10k-labels-idx1-ubyte.gz"
mkdata "$t/data_dir_file"; rm "$t/data_dir_file/train-images-idx3-ubyte"; mkdir "$t/data_dir_file/train-images-idx3-ubyte"
mkdata "$t/data_fifo"; rm "$t/data_fifo/t10k-images-idx3-ubyte"; mkfifo "$t/data_fifo/t10k-images-idx3-ubyte"
mkdata "$t/data_truncated"; printf '\x00\x00\x08\x01\x00\x00\x00\x05\x01' >"$t/data_truncated/train-labels-idx1-ubyte"
mkdir "$t/ckpt_dir"
printf 'not a checkpoint' >"$t/ckpt_garbage.safetensors"

P=$ptxlab
# ---- PTX ----------------------------------------------------------------------
expect "ptx: missing file"              1 "nope.ptx: error: does not exist"                 "$P" check --no-twins "$t/nope.ptx"
expect "ptx: a directory"               1 "dir.ptx: error: is a directory"                  "$P" check --no-twins "$t/dir.ptx"
expect "ptx: a FIFO does not hang"      1 "fifo.ptx: error: is a FIFO, not a regular file"  "$P" check --no-twins "$t/fifo.ptx"
expect "ptx: a device"                  1 "/dev/null: error: is a character device"         "$P" check --no-twins /dev/null
if [ "$(id -u)" != 0 ]; then
expect "ptx: no read permission"        1 "unreadable.ptx: error: permission denied"        "$P" check --no-twins "$t/unreadable.ptx"
fi
expect "ptx: empty file"                1 "empty.ptx: error: file is empty"                 "$P" check --no-twins "$t/empty.ptx"
expect "ptx: binary file"               1 "binary data"                                     "$P" check --no-twins "$t/binary.ptx"
expect "ptx: header only, no .entry"    1 "header_only.ptx: error: no .entry in this file"  "$P" check --no-twins "$t/header_only.ptx"
expect "ptx: .func only, no .entry"     1 ".func is a device function, not a kernel"        "$P" check --no-twins "$t/func_only.ptx"
expect "ptx: no .version"               1 "no_version.ptx: error: no .version directive"    "$P" check --no-twins "$t/no_version.ptx"
expect "ptx: nvJitLink's log is shown"  1 "its error log:"                                  "$P" check --no-twins "$t/no_version.ptx"
expect "ptx: UTF-8 BOM"                 1 "bom.ptx:1:1: error: the file starts with a byte-order mark (UTF-8 BOM" "$P" check --no-twins "$t/bom.ptx"
expect "ptx: non-ASCII named"           1 "gamma.ptx:4:8: error: non-ASCII character U+03B3" "$P" check --no-twins "$t/gamma.ptx"
expect "ptx: a 5 MB comment line"     0 "long_line.ptx: ok"                               "$P" check --no-twins "$t/long_line.ptx"
expect "ptx: a 6 MB parameter list"   1 "long_params.ptx:8: error: Entry function 'k' uses too much parameter space" "$P" check --no-twins "$t/long_params.ptx"
expect "ptx: syntax error at its line"  1 "syntax_error.ptx:33: error:"                     "$P" check --no-twins "$src/tests/fixtures/ptx/syntax_error.ptx"
expect_stderr "ptx: diagnostics on stderr" 1 "syntax_error.ptx:33: error:"                 "$P" check --no-twins "$src/tests/fixtures/ptx/syntax_error.ptx"
expect "ptx: every file checked"        1 "check: 3 files: 1 ok, 2 failed"                  "$P" check --no-twins "$t/empty.ptx" "$t/good.ptx" "$t/bom.ptx"
expect "ptx: a missing twin"            1 "mine.ptx: error: no CUDA C twin"                 "$P" check "$t/mine.ptx"
expect "ptx: --no-twins"                0 "check: 1 file: 1 ok, 0 failed"                   "$P" check --no-twins "$t/mine.ptx"
expect "ptx: PTXLAB_REFERENCE_DIR=/nope" 2 "PTXLAB_REFERENCE_DIR '/nope' does not exist"   PTXLAB_REFERENCE_DIR=/nope "$P" check
expect "ptx: --arch sm_52"              2 "architecture 'sm_52' is not supported by this nvJitLink (sm_" "$P" check --arch sm_52
expect "ptx: --arch banana"             2 "architecture 'banana' is not of the form sm_NN"  "$P" check --arch banana
# ---- sass (#16): the input is checked before nvdisasm is looked for ------------
fake="$src/tests/fixtures/sass/fake_nvdisasm.sh"   # a stand-in: this machine may have no nvdisasm
expect "sass: missing file"             2 "nope.ptx: does not exist"                        PTXLAB_NVDISASM="$fake" "$P" sass "$t/nope.ptx"
expect "sass: unknown entry, listed"    2 "good.ptx: no entry 'nope' (its entries: k)"      PTXLAB_NVDISASM="$fake" "$P" sass "$t/good.ptx:nope"
expect "sass: PTX error at its line"    2 "syntax_error.ptx:33: error:"                     PTXLAB_NVDISASM="$fake" "$P" sass "$src/tests/fixtures/ptx/syntax_error.ptx"
expect "sass: no .entry"                2 "header_only.ptx: no .entry in this file"         PTXLAB_NVDISASM="$fake" "$P" sass "$t/header_only.ptx"
expect "sass: --diff, no common entry"  2 "have no entry in common"                         PTXLAB_NVDISASM="$fake" "$P" sass "$t/good.ptx" --diff "$src/tests/fixtures/sass/scale.ptx"
expect "sass: nvdisasm not there"       1 "nvdisasm, part of the CUDA toolkit: \$CUDA_HOME/bin/nvdisasm" PTXLAB_NVDISASM=/nonexistent/nvdisasm "$P" sass "$t/good.ptx"
expect "sass: nvdisasm fails"           1 "exited with status 3:"                           FAKE_NVDISASM_EXIT=3 PTXLAB_NVDISASM="$fake" "$P" sass "$t/good.ptx"
expect "sass: --control with --diff"    2 "excludes"                                         PTXLAB_NVDISASM="$fake" "$P" sass --control "$t/good.ptx" --diff "$t/good.ptx"
expect "sass: --control, nvdisasm fails" 1 "exited with status 3:"                          FAKE_NVDISASM_EXIT=3 PTXLAB_NVDISASM="$fake" "$P" sass --control "$t/good.ptx"
expect "sass: --control, no listing"    1 "no canned listing"                                PTXLAB_NVDISASM="$fake" "$P" sass --control "$src/tests/fixtures/sass/scale.ptx"
# ---- profile (#36): input, outputs and CUPTI are checked before the GPU --------------------
cupti_nope="PTXLAB_CUPTI_LIB=/nonexistent/libcupti.so.13"
expect "profile: missing file"          2 "nope.ptx: does not exist"                        $nogpu PTXLAB_NVDISASM="$fake" "$P" profile "$t/nope.ptx"
expect "profile: unknown entry, listed" 2 "step.ptx: no entry 'nope' (its entries: fused_step)" $nogpu PTXLAB_NVDISASM="$fake" "$P" profile "$src/ptx/step.ptx:nope"
expect "profile: no contract, not ours" 2 "good.ptx: no contract header, and no ptxlab kernel" $nogpu PTXLAB_NVDISASM="$fake" "$P" profile "$t/good.ptx"
expect "profile: contract, other entry" 2 "no entry 'k'"                                    $nogpu PTXLAB_NVDISASM="$fake" "$P" profile "$src/tests/fixtures/contract/forward3.ptx:k"
expect "profile: no target"             2 "profile what? Give FILE.ptx[:ENTRY], or --train" $nogpu "$P" profile
expect "profile: file and --train"      2 "and --train together"                            $nogpu "$P" profile "$src/ptx/step.ptx" --train
expect "profile: train flag, no --train" 2 "--layers is one of train's flags: it goes with --train" $nogpu "$P" profile "$src/ptx/step.ptx" --layers 784,10
expect "profile --train: a flag it refuses" 2 "--save"                                      $nogpu "$P" profile --train --save "$t/x.safetensors"
expect "profile --train: train refuses" 2 "--max-steps"                                     $nogpu "$P" profile --train --max-steps lots
expect "profile: --period out of range" 2 "--period 40: CUPTI samples every 2^period cycles" $nogpu PTXLAB_NVDISASM="$fake" "$P" profile "$src/ptx/step.ptx" --period 40
expect "profile: --html unwritable"     2 "--html '$t/no/dir/p.html' cannot be created"     $nogpu $cupti_nope PTXLAB_NVDISASM="$fake" "$P" profile "$src/ptx/step.ptx:fused_step" --html "$t/no/dir/p.html"
expect "profile: --html a directory"    2 "--html '$t'"                                     $nogpu $cupti_nope PTXLAB_NVDISASM="$fake" "$P" profile "$src/ptx/step.ptx:fused_step" --html "$t"
expect "profile: --json and --html one file" 2 "each output needs its own file"            $nogpu $cupti_nope PTXLAB_NVDISASM="$fake" "$P" profile "$src/ptx/step.ptx" --json "$t/p.out" --html "$t/p.out"
expect "profile: CUPTI missing"         1 "CUPTI not found"                                 $nogpu $cupti_nope PTXLAB_NVDISASM="$fake" "$P" profile "$src/ptx/step.ptx:fused_step" --json "$t/p.json"
expect "profile: CUPTI missing, how"    1 "set PTXLAB_CUPTI_LIB=/path/to/libcupti.so.13"    $nogpu $cupti_nope PTXLAB_NVDISASM="$fake" "$P" profile --train --layers 4,3,10 --batch 1 --data "$t/data"
expect "profile: --json unwritable"     2 "--json '$t/no/dir/p.json' cannot be created"     $nogpu $cupti_nope PTXLAB_NVDISASM="$fake" "$P" profile "$src/ptx/step.ptx:fused_step" --json "$t/no/dir/p.json"
expect "profile: --json a directory"    2 "--json '$t'"                                     $nogpu $cupti_nope PTXLAB_NVDISASM="$fake" "$P" profile "$src/ptx/step.ptx:fused_step" --json "$t"
expect "profile: --timeout -1"          2 "--timeout must be >= 0 seconds"                  $nogpu $cupti_nope PTXLAB_NVDISASM="$fake" "$P" profile "$src/ptx/step.ptx:fused_step" --timeout -1
expect "profile: nothing half-written"  0 ""                                                test ! -e "$t/p.json" -a ! -e "$t/p.out" -a ! -e "$t/no"
# profile --train (#36): train's own checks (prepare_run, the code train runs) come before CUPTI
# and the GPU. Every case has CUPTI and the driver missing: a check made too late would answer
# "CUPTI not found" (exit 1) instead of train's message (exit 2). The first case shows that
# flags train takes, on data it takes, do get that far.
ptrain=(env $nogpu $cupti_nope PTXLAB_NVDISASM="$fake" "$P" profile --train)
tiny=(--layers 4,3,10 --batch 1 --data "$t/data")
expect "profile --train: good flags reach CUPTI"   1 "CUPTI not found"                         "${ptrain[@]}" "${tiny[@]}"
expect "profile --train: --batch 0"                2 "--batch must be at least 1"              "${ptrain[@]}" --batch 0
expect "profile --train: --beta1 out of range"    2 "--beta1 2 is out of range"               "${ptrain[@]}" --optimizer adam --beta1 2
expect "profile --train: --beta1 with sgd"        2 "--beta1 does not apply to --optimizer sgd: it sets adam, adamw, nadam" "${ptrain[@]}" --optimizer sgd --beta1 0.8
expect "profile --train: --alpha, default recipe" 2 "--alpha does not apply to --optimizer nesterov: it sets rmsprop (the optimizer of the default recipe" "${ptrain[@]}" --alpha 0.9
expect "profile --train: --momentum, classic"     2 "--momentum does not apply to --optimizer sgd: it sets momentum, nesterov (the optimizer of --preset classic" "${ptrain[@]}" --preset classic --momentum 0.9
expect "profile --train: --eps with rmsprop"      1 "CUPTI not found"                         "${ptrain[@]}" "${tiny[@]}" --optimizer rmsprop --eps 1e-6
expect "profile --train: --target out of range"   2 "--target must be in (0, 1]"              "${ptrain[@]}" --target 2
expect "profile --train: --dense-program, 2 layers" 2 "--dense-program: dense_program runs the model trainer's step" "${ptrain[@]}" --dense-program
expect "profile --train: takes --no-progress"     1 "CUPTI not found"                         "${ptrain[@]}" "${tiny[@]}" --no-progress
expect "profile --train: --batch past the data"    2 "--batch 5 is larger than the training set (2 samples)" "${ptrain[@]}" --layers 4,3,10 --batch 5 --data "$t/data"
expect "profile --train: --epochs 0"               2 "--epochs must be at least 1"             "${ptrain[@]}" "${tiny[@]}" --epochs 0
expect "profile --train: --lr -1"                  2 "--lr must be a positive finite number, got -1" "${ptrain[@]}" "${tiny[@]}" --lr -1
expect "profile --train: --model bad layer"        2 "layer 2 'poo' is not a layer"            "${ptrain[@]}" --model conv32,poo,fc10
expect "profile --train: --model fc10"             2 "--model fc10 has 1 fc layer"             "${ptrain[@]}" --model fc10
expect "profile --train: --model and --layers"     2 "--model and --layers both set the network" "${ptrain[@]}" --model fc64,fc10 --layers 784,64,10
expect "profile --train: --hidden and --layers"    2 "both set the network: give one of them"  "${ptrain[@]}" --layers 784,64,10 --hidden 32
expect "profile --train: --model cnn --kernels fast" 2 "the model trainer runs on the conv, pool and dense kernels" "${ptrain[@]}" --model cnn --kernels fast
expect "profile --train: --model cnn --three-launches" 2 "is a flag of the one-launch steps of 2 fc layers" "${ptrain[@]}" --model cnn --three-launches
expect "profile --train: --kernels bogus"          2 "bogus"                                   "${ptrain[@]}" "${tiny[@]}" --kernels bogus
expect "profile --train: --optimizer"              2 "unknown optimizer 'lbfgs'"               "${ptrain[@]}" "${tiny[@]}" --optimizer lbfgs
expect "profile --train: --loss"                   2 "unknown loss 'l1'"                       "${ptrain[@]}" "${tiny[@]}" --loss l1
expect "profile --train: --schedule"               2 "unknown schedule 'linear'"               "${ptrain[@]}" "${tiny[@]}" --schedule linear
expect "profile --train: --activation"             2 "unknown activation 'bogus'"              "${ptrain[@]}" "${tiny[@]}" --activation bogus
expect "profile --train: --init"                   2 "unknown init 'zeros'"                    "${ptrain[@]}" "${tiny[@]}" --init zeros
expect "profile --train: --preset"                 2 "unknown preset 'fast' (known: classic, notebook)" "${ptrain[@]}" "${tiny[@]}" --preset fast
expect "profile --train: --momentum 2"             2 "--momentum 2 is out of range"            "${ptrain[@]}" "${tiny[@]}" --momentum 2
expect "profile --train: --weight-decay -1"        2 "--weight-decay -1 is out of range"       "${ptrain[@]}" "${tiny[@]}" --weight-decay -1
expect "profile --train: --warmup 1"               2 "--warmup 1 is out of range"              "${ptrain[@]}" "${tiny[@]}" --warmup 1
expect "profile --train: --data missing"           2 "data directory '/nonexistent' does not exist" "${ptrain[@]}" --data /nonexistent
expect "profile --train: --data truncated"         2 "train-labels-idx1-ubyte"                 "${ptrain[@]}" --layers 4,3,10 --batch 1 --data "$t/data_truncated"
expect "profile --train: --data \"\""              2 "--data: is an empty path"                "${ptrain[@]}" --data ""
expect "profile --train: the network vs the data"  2 "the network takes 784 inputs but the images have 2x2 = 4 pixels" "${ptrain[@]}" --layers 784,64,10 --batch 1 --data "$t/data"
expect "profile --train: --ptx-dir a file"         2 "is a regular file, not a directory"      "${ptrain[@]}" "${tiny[@]}" --ptx-dir "$t/good.ptx"
expect "profile --train: PTXLAB_PTX_DIR=/nowhere"  2 "PTXLAB_PTX_DIR '/nowhere' does not exist" env PTXLAB_PTX_DIR=/nowhere "${ptrain[@]}" "${tiny[@]}"
expect "profile --train: --max-steps -1"           2 "--max-steps"                             "${ptrain[@]}" "${tiny[@]}" --max-steps -1
expect "profile --train: --device -1"              2 "--device must be a CUDA device ordinal"  "${ptrain[@]}" "${tiny[@]}" --device -1
expect "profile --train: --seed -1"                2 "--seed must be a whole number"           "${ptrain[@]}" "${tiny[@]}" --seed -1
expect "profile --train: --repeat"                 2 "--repeat goes with FILE.ptx"             "${ptrain[@]}" "${tiny[@]}" --repeat 3
expect "profile --train: --resume is train's only" 2 "--resume"                                "${ptrain[@]}" "${tiny[@]}" --resume "$t/x.safetensors"
expect "profile --train: --html first"             2 "--html '$t/no/dir/p.html' cannot be created" "${ptrain[@]}" --data /nonexistent --html "$t/no/dir/p.html"
# ---- paths --------------------------------------------------------------------
expect "path: --ptx-dir with files"     2 "give one or the other"                           "$P" check --ptx-dir "$t/ptxdir" "$t/good.ptx"
expect "path: --ptx-dir is a file"      2 "--ptx-dir '$t/good.ptx' is a regular file, not a directory" "$P" check --ptx-dir "$t/good.ptx"
expect "path: --ptx-dir missing"        2 "--ptx-dir '$t/none' does not exist"              "$P" check --ptx-dir "$t/none"
expect "path: --ptx-dir, tree's twins"  0 "check: 1 file: 1 ok, 0 failed"                   "$P" check --ptx-dir "$t/ptxdir"
expect "path: verify --ptx-dir a file"  2 "--ptx-dir '$t/good.ptx' is a regular file, not a directory" $nogpu "$P" verify --ptx-dir "$t/good.ptx"
expect "path: data dir is a file"       2 "data directory '$t/good.ptx' is a regular file, not a directory" "$P" data "$t/good.ptx"
# ---- data ---------------------------------------------------------------------
expect "data: missing directory"        2 "tools/fetch_mnist.sh"                            "$P" data "$t/none"
expect "data: a directory as a file"    2 "train-images-idx3-ubyte: is a directory"         "$P" data "$t/data_dir_file"
expect "data: a FIFO does not hang"     2 "t10k-images-idx3-ubyte: is a FIFO, not a regular file" "$P" data "$t/data_fifo"
expect "data: truncated labels"         2 "truncated"                                       "$P" data "$t/data_truncated"
expect "data: X and X.gz disagree"      2 "train-labels-idx1-ubyte.gz both exist and hold different data" "$P" data "$t/data_gz_differs"
expect "data: X and X.gz agree, named"  0 "t10k-labels-idx1-ubyte (the same data as t10k-labels-idx1-ubyte.gz)" "$P" data "$t/data_gz_same"
expect "data: the files read are named" 0 "read $t/data/train-images-idx3-ubyte"            "$P" data "$t/data"
# ---- flags --------------------------------------------------------------------
expect "flags: unknown command"         2 "unknown command 'frobnicate' (commands: check, data, verify, train, eval, bench" "$P" frobnicate
expect "flags: no command"              2 "A subcommand is required"                        "$P"
expect "flags: unknown flag"            2 "--bogus"                                         "$P" check --bogus
expect "flags: verify --shape \"\""     2 "--shape is empty"                                $nogpu "$P" verify --shape ""
expect "flags: verify --shape bad"      2 "--shape"                                         $nogpu "$P" verify --shape 1,x
expect "flags: verify unknown kernel"   2 "kernel 'nope'"                           $nogpu "$P" verify --kernel nope --list
expect "flags: train --batch 0"         2 "--batch must be at least 1"                      $nogpu "$P" train --batch 0
expect "flags: train --beta2 with momentum" 2 "--beta2 does not apply to --optimizer momentum: it sets adam, adamw, nadam" $nogpu "$P" train --optimizer momentum --beta2 0.9
expect "flags: train --seed -1"         2 "--seed must be a whole number from 0 to 18446744073709551615 (2^64 - 1), got '-1'" $nogpu "$P" train --seed -1
expect "flags: --hidden with --layers"  2 "both set the network: give one of them"          $nogpu "$P" train --layers 784,64,10 --hidden 32
# --model (#15): a bad layer list names the layer; what the CNN trainer does not take yet is refused.
expect "flags: --model unknown layer"     2 "layer 2 'poo' is not a layer"                   $nogpu "$P" train --model conv32,poo,fc10
expect "flags: --model conv after fc"     2 "layer 2 'conv8' comes after an fc layer"        $nogpu "$P" train --model fc64,conv8,fc10
expect "flags: --model odd pool"          2 "layer 3 'pool' gets 1x7x7"                      $nogpu "$P" train --model pool,pool,pool,fc10
expect "flags: --model trailing comma"    2 "layer 3 is empty"                               $nogpu "$P" train --model fc64,fc10,
# Every activation passes the flag checks (act.ptx runs the others): the data directory is what stops it.
expect "flags: --model cnn --activation tanh" 2 "data directory '/nonexistent' does not exist" $nogpu "$P" train --model cnn --activation tanh --data /nonexistent
expect "flags: 2 layers, tc, gelu"         2 "data directory '/nonexistent' does not exist"   $nogpu "$P" train --layers 784,64,10 --kernels tc --activation gelu --data /nonexistent
expect "flags: --model fc, fused, sigmoid" 2 "data directory '/nonexistent' does not exist"  $nogpu "$P" train --model fc64,fc32,fc10 --kernels fused --activation sigmoid --data /nonexistent
expect "flags: --model bn, gelu"          2 "data directory '/nonexistent' does not exist"   $nogpu "$P" train --model conv8,bn,pool,fc32,bn,fc10 --activation gelu --data /nonexistent
expect "flags: --layers 3 layers gelu"    2 "data directory '/nonexistent' does not exist"   $nogpu "$P" train --layers 784,64,32,10 --activation gelu --data /nonexistent
expect "flags: --model cnn --three-launches" 2 "is a flag of the one-launch steps of 2 fc layers" $nogpu "$P" train --model cnn --three-launches
expect "flags: --model cnn --kernels"     2 "the model trainer runs on the conv, pool and dense kernels"      $nogpu "$P" train --model cnn --kernels fast
expect "flags: --model with --layers"     2 "--model and --layers both set the network"      $nogpu "$P" train --model fc64,fc10 --layers 784,64,10
expect "flags: train --optimizer"       2 "unknown optimizer 'lbfgs'"                       $nogpu "$P" train --optimizer lbfgs
expect "flags: train --warmup 1"        2 "--warmup"                                        $nogpu "$P" train --warmup 1
expect "flags: train --activation"      2 "unknown activation 'bogus' (choose relu, leaky-relu, tanh, sigmoid or gelu)" $nogpu "$P" train --activation bogus
expect "flags: verify activation code"  2 "the activation code must be 0 relu, 1 leaky-relu, 2 tanh, 3 sigmoid or 4 gelu, got 5" $nogpu "$P" verify --kernel grad2 --shape 1,2,3,4,1,5 --list
expect "paths: --save in a missing dir" 2 "its directory /nonexistent does not exist"       $nogpu "$P" train --save /nonexistent/m.safetensors
expect "paths: --log is a directory"    2 "is a directory, not a file to write"             $nogpu "$P" train --log "$t"
expect "paths: --resume is missing"     2 "does not exist"                                  $nogpu "$P" train --resume "$t/nope.safetensors"
# ---- checkpoints (eval reads the checkpoint before it looks for a GPU) ----------
expect     "ckpt: a directory"          2 "is a directory"                                  $nogpu "$P" eval --load "$t/ckpt_dir" --data "$t/data"
expect     "ckpt: a FIFO"               2 "is a FIFO, not a regular file"                   $nogpu "$P" eval --load "$t/fifo.ptx" --data "$t/data"
expect     "ckpt: missing"              2 "does not exist"                                  $nogpu "$P" eval --load "$t/none.safetensors" --data "$t/data"
expect     "ckpt: garbage"              2 "ckpt_garbage.safetensors"                        $nogpu "$P" eval --load "$t/ckpt_garbage.safetensors" --data "$t/data"
# ---- output -------------------------------------------------------------------
expect_full "out: --help >/dev/full"    1 "writing to standard output failed"               "$P" --help
expect_full "out: check >/dev/full"     1 "writing to standard output failed"               "$P" check --no-twins "$t/good.ptx"
expect_full "out: data >/dev/full"      1 "writing to standard output failed"               "$P" data "$t/data"
expect_full "out: verify --list >/dev/full" 1 "writing to standard output failed"           "$P" verify --list
expect_full "out: a failure keeps its code" 1 "empty.ptx: error: file is empty"             "$P" check --no-twins "$t/empty.ptx"

# ---- round two (#34): streams, flags, environment, outputs, bounded reads, names -----------
# expect_closed NAME CODE FD COMMAND...: FD (1 or 2) closed; the exit code only (no signal, no terminate).
expect_closed() {
  local name=$1 want=$2 fd=$3; shift 3
  if [ "$fd" = 2 ]; then timeout 120 env "$@" >"$t/out" 2>&-; else timeout 120 env "$@" >&- 2>"$t/out"; fi
  local got=$?
  judge "$name" "$want" "" "$t/out" "$got"
}
# expect_absent NAME FILE: FILE must not exist (nothing half-written left behind).
expect_absent() {
  if [ -e "$2" ]; then echo "FAIL  $1: $2 was left behind"; fails=$((fails + 1)); else echo "ok    $1"; passes=$((passes + 1)); fi
}
# A valid checkpoint for eval, written by train's own format through the test helper below.
expect_closed "stream: stderr closed, check fails cleanly"   1 2 "$P" check --no-twins "$t/nope.ptx"
expect_closed "stream: stderr closed, bad flag"              2 2 "$P" train --batch 0
expect_closed "stream: stderr closed, bad seed (CLI11 path)" 2 2 "$P" verify --seed -1
expect_closed "stream: stderr closed, unknown command"       2 2 "$P" frobnicate
expect_closed "stream: stdout closed is refused"             1 1 "$P" check --no-twins "$t/good.ptx"
expect "stream: stdout closed, said on stderr"  1 "standard output is closed"  sh -c "exec \"\$0\" check --no-twins \"\$1\" >&-" "$P" "$t/good.ptx"
# Flags every command shares (host/cli/flags.hpp).
seedmsg="--seed must be a whole number from 0 to 18446744073709551615"
expect "flags: verify --seed -1"        2 "$seedmsg (2^64 - 1), got '-1'"                    $nogpu "$P" verify --seed -1
expect "flags: verify --seed \"\""      2 "$seedmsg (2^64 - 1), got ''"                      $nogpu "$P" verify --seed ""
expect "flags: bench --seed 1e3"        2 "$seedmsg (2^64 - 1), got '1e3'"                   $nogpu "$P" bench --seed 1e3
expect "flags: bench --seed +5"         2 "got '+5'"                                         $nogpu "$P" bench --seed +5
expect "flags: train --seed 2^64"       2 "--seed 18446744073709551616 is too large"         $nogpu "$P" train --seed 18446744073709551616
expect "flags: train --seed 2^64 - 1"   3 "no NVIDIA driver found"                           $nogpu "$P" train --seed 18446744073709551615 --layers 4,3,10 --batch 1 --data "$t/data"
expect "flags: verify --device -1"      2 "--device must be a CUDA device ordinal (0, 1, ...), got -1" $nogpu "$P" verify --device -1
expect "flags: bench --device -3"       2 "--device must be a CUDA device ordinal"           $nogpu "$P" bench --device -3
expect "flags: train --device -1"       2 "--device must be a CUDA device ordinal"           $nogpu "$P" train --device -1
expect "flags: eval --device -1"        2 "--device must be a CUDA device ordinal"           $nogpu "$P" eval --load x --device -1
expect "flags: verify FILE --ptx-dir"   2 "--ptx-dir and a FILE.ptx together"                $nogpu "$P" verify "$t/good.ptx" --ptx-dir "$t/ptxdir"
expect "flags: verify FILE --quick"     2 "--quick picks a smaller set of the built-in kernels' cases" $nogpu "$P" verify "$t/good.ptx" --quick
expect "flags: bench FILE --sets"       2 "--sets does not go with a FILE.ptx"               $nogpu "$P" bench "$src/ptx/lessons/01_predicates.ptx" --sets fused
expect "flags: bench --headline --sets"  2 "--sets does not go with --headline"                $nogpu "$P" bench --headline --sets fused
expect "flags: bench --headline --no-torch" 2 "--no-torch does not go with --headline"         $nogpu "$P" bench --headline --no-torch
expect "flags: bench FILE --no-torch"   2 "--no-torch does not go with a FILE.ptx"           $nogpu "$P" bench "$src/ptx/lessons/01_predicates.ptx" --no-torch
expect "verify: --racecheck, no sanitizer" 1 "\`ptxlab verify --racecheck\` needs compute-sanitizer" $nogpu PTXLAB_COMPUTE_SANITIZER=/nonexistent/cs "$P" verify "$src/ptx/lessons/04_shared_barrier.ptx" --racecheck
expect "verify: --synccheck --list"     2 "--list only names the cases"                      $nogpu "$P" verify "$src/ptx/lessons/04_shared_barrier.ptx" --synccheck --list
expect "verify: --racecheck, bad file first" 2 "nope.ptx"                                   $nogpu PTXLAB_COMPUTE_SANITIZER=/nonexistent/cs "$P" verify "$t/nope.ptx" --racecheck
expect "flags: bench FILE --json, no GPU" 3 "no NVIDIA driver found"                         $nogpu "$P" bench "$src/ptx/lessons/01_predicates.ptx" --json "$t/b.json"
expect_absent "flags: bench FILE --json wrote nothing" "$t/b.json"
expect "flags: bench FILE --json a dir"  2 "--json"                                           $nogpu "$P" bench "$src/ptx/lessons/01_predicates.ptx" --json "$t"
expect "flags: verify FILE --list"      0 "leaky_relu    N=1"                                $nogpu "$P" verify "$src/ptx/lessons/01_predicates.ptx" --list
expect "flags: --model fc10 names it"   2 "--model fc10 has 1 fc layer; a network takes 2 fc layers or more" $nogpu "$P" train --model fc10
# Paths given as "" are refused, not read as "the default".
expect "paths: train --save \"\""       2 "--save: is an empty path"                         $nogpu "$P" train --save ""
expect "paths: train --data \"\""       2 "--data: is an empty path"                         $nogpu "$P" train --data ""
expect "paths: bench --json \"\""       2 "--json: is an empty path"                         $nogpu "$P" bench --json ""
expect "paths: eval --load \"\""        2 "--load: is an empty path"                         $nogpu "$P" eval --load ""
expect "paths: data \"\""               2 "dir: is an empty path"                            "$P" data ""
expect "paths: new --dir \"\""          2 "--dir: is an empty path"                          "$P" new k --dir ""
# Two outputs in one file, however spelt.
expect "outputs: --save X --log X"      2 "--save and --log both name"                       $nogpu "$P" train --save "$t/x.st" --log "$t/x.st"
expect "outputs: ./X and X"             2 "--save and --log-steps both name"                 $nogpu sh -c "cd \"\$0\" && exec \"\$1\" train --save ./y.st --log-steps y.st" "$t" "$P"
expect "outputs: --save-init X --save X" 2 "--save and --save-init both name"                $nogpu "$P" train --save "$t/z.st" --save-init "$t/../$(basename "$t")/z.st"
expect "outputs: --log /dev/null is fine" 3 "no NVIDIA driver found"                         $nogpu "$P" train --log /dev/null --log-steps /dev/null --layers 4,3,10 --batch 1 --data "$t/data"
expect "outputs: --save /dev/null is not" 2 "--save '/dev/null' is a character device, not a file to write" $nogpu "$P" train --save /dev/null
# Environment variables are inputs too: checked before the GPU, named in the message.
for cmd in verify train bench "eval --load x"; do
expect "env: PTXLAB_PTX_DIR=/nowhere, $cmd" 2 "PTXLAB_PTX_DIR '/nowhere' does not exist"     $nogpu PTXLAB_PTX_DIR=/nowhere "$P" $cmd
done
expect "env: PTXLAB_PTX_DIR a file"     2 "PTXLAB_PTX_DIR '$src/README.md' is a regular file, not a directory" $nogpu PTXLAB_PTX_DIR="$src/README.md" "$P" verify
expect "env: PTXLAB_REFERENCE_DIR=/nowhere, verify" 2 "PTXLAB_REFERENCE_DIR '/nowhere' does not exist" $nogpu PTXLAB_REFERENCE_DIR=/nowhere "$P" verify
expect "env: PTXLAB_REFERENCE_DIR a file, train" 2 "PTXLAB_REFERENCE_DIR '$t/good.ptx' is a regular file" $nogpu PTXLAB_REFERENCE_DIR="$t/good.ptx" "$P" train
# Bounded reads: a gzip bomb under a valid header stops where the header's data ends.
mkdata "$t/bomb"
{ printf '\x00\x00\x08\x01\x00\x00\x00\x02\x01\x07'; head -c 100000000 /dev/zero; } | gzip -1 >"$t/bomb/train-labels-idx1-ubyte.gz"
rm "$t/bomb/train-labels-idx1-ubyte"
expect "data: a gzip bomb is refused early" 2 "train-labels-idx1-ubyte.gz: more data than its header describes (10 bytes of header and data)" "$P" data "$t/bomb"
mkdata "$t/bad_magic_gz"; rm "$t/bad_magic_gz/t10k-labels-idx1-ubyte"
{ printf '\x01\x02\x08\x01'; head -c 50000000 /dev/zero; } | gzip -1 >"$t/bad_magic_gz/t10k-labels-idx1-ubyte.gz"
expect "data: a bad header is judged before inflating" 2 "bad magic number 0x01020801"     "$P" data "$t/bad_magic_gz"
expect "sass: a runaway nvdisasm is stopped" 1 "printed more than 64 MiB; it was stopped"  FAKE_NVDISASM_FLOOD=100 PTXLAB_NVDISASM="$fake" "$P" sass "$t/good.ptx"
expect "sass: FILE: with no entry"      2 "'$t/good.ptx:': the entry name after ':' is empty" PTXLAB_NVDISASM="$fake" "$P" sass "$t/good.ptx:"
# Nothing left behind: no output file before there is something to write, no temporary file after a signal.
expect "left: bench --json without a GPU" 3 "no NVIDIA driver found"                         $nogpu "$P" bench --json "$t/new.json"
expect_absent "left: bench --json wrote nothing" "$t/new.json"
mkdir "$t/tmp"
for sig in INT TERM; do
  set -m  # a background job of a script ignores SIGINT unless job control is on
  TMPDIR="$t/tmp" FAKE_NVDISASM_SLEEP=30 PTXLAB_NVDISASM="$fake" "$P" sass "$t/good.ptx" >/dev/null 2>&1 &
  pid=$!; set +m
  for _ in $(seq 50); do [ -n "$(ls -A "$t/tmp")" ] && break; sleep 0.1; done
  kill -$sig $pid; wait $pid 2>/dev/null; pkill -f "sleep 30" 2>/dev/null
  if [ -n "$(ls -A "$t/tmp")" ]; then echo "FAIL  left: SIG$sig during sass left $(ls -A "$t/tmp")"; fails=$((fails + 1)); rm -f "$t/tmp"/*
  else echo "ok    left: SIG$sig during sass removes the cubin"; passes=$((passes + 1)); fi
done
# ptxlab new: names are proven by assembling and compiling them; --dir is made.
expect "new: --dir is created"          0 "wrote $t/mine/saxpy.ptx"                          "$P" new saxpy --dir "$t/mine"
expect "new: its pair passes check"     0 "check: 1 file: 1 ok, 0 failed"                    "$P" check "$t/mine/saxpy.ptx"
expect "new: '_' is refused"            2 "'_' cannot be a kernel name: the PTX with it does not assemble" "$P" new _ --dir "$t/new2"
expect "new: a C++ keyword"             2 "'int' cannot be a kernel name: the CUDA C twin with it does not compile" "$P" new int --dir "$t/new2"
expect "new: 200 letters"               2 "is 200 characters long; ptxlab new takes at most 64" "$P" new "$(head -c 200 /dev/zero | tr '\0' a)" --dir "$t/new2"
expect "new: a dash, named"             2 "character 2 is '-'"                               "$P" new a-b --dir "$t/new2"
expect_absent "new: refused names write nothing" "$t/new2/reference"
expect "new: --dir is a file"           2 "--dir '$t/good.ptx' is a regular file, not a directory" "$P" new k --dir "$t/good.ptx"
expect "new: --dir under a file"        2 "--dir '$t/good.ptx/sub' cannot be created:"       "$P" new k --dir "$t/good.ptx/sub"
expect "new: --dir, parents made too"   0 "wrote $t/deep/er/k.ptx"                           "$P" new k --dir "$t/deep/er"
expect "new: --dir, no overwrite"       2 "k.ptx already exists; ptxlab new does not overwrite" "$P" new k --dir "$t/deep/er"
mkdir -p "$t/ro" && chmod 555 "$t/ro"
if [ "$(id -u)" != 0 ]; then
expect "new: --dir cannot be made"      2 "--dir '$t/ro/a/b' cannot be created:"             "$P" new k --dir "$t/ro/a/b"
fi
expect_absent "new: a refused --dir leaves nothing" "$t/good.ptx/sub"
# Messages: where in ptxlab an error was raised only with --verbose.
expect "verbose: no source line by default" 2 "ptxlab: error: --batch must be at least 1"   $nogpu "$P" train --batch 0
if grep -q "raised at" "$t/out"; then echo "FAIL  verbose: '(raised at' printed without --verbose"; fails=$((fails + 1)); fi
expect "verbose: --verbose shows it"    2 "(raised at host/"                                 $nogpu "$P" train --batch 0 --verbose
# ---- contracts and PTX limits (#34) ---------------------------------------------
# nvJitLink overflows a 100 000-byte message buffer on a token of about 99 870 characters; a
# token past 8192 is refused before it is called, by every command. Comments are not limited.
mkdir "$t/limits"
tok() { head -c "$1" /dev/zero | tr '\0' "$2"; }
{ printf '%s.visible .entry k() { mov.u32 %%r1, ' "$header"; tok 32768 A; printf '; }\n'; } >"$t/limits/ident.ptx"
{ printf '%s.visible .entry k() { mov.u32 %%r1, ' "$header"; tok 100000 A; printf '; }\n'; } >"$t/limits/ident100k.ptx"
{ printf '%s.visible .entry k() { mov.u32 %%r1, ' "$header"; tok 8192 A; printf '; }\n'; } >"$t/limits/at_limit.ptx"
{ printf '%s.visible .entry k' "$header"; tok 100000 B; printf '()\n{\n    ret;\n}\n'; } >"$t/limits/entry.ptx"
{ printf '%s.file 1 "' "$header"; tok 100000 p; printf '"\n%s' "$kernel"; } >"$t/limits/string.ptx"
{ printf '%s// ' "$header"; tok 100000 C; printf '\n/* '; tok 100000 D; printf ' */\n%s' "$kernel"; } >"$t/limits/comments.ptx"
{ printf '%s.visible .entry k(.param .u32 n)\n{\n    .reg .u32 %%c;\n    ld.param.u32 %%c' "$header"; tok 200000 ' ';
  printf ', [n];\n    ret;\n}\n'; } >"$t/limits/spaces.ptx"
mkdir "$t/limits/dir"; cp "$t/limits/ident.ptx" "$t/limits/dir/forward.ptx"
L=$t/limits
expect "limit: a 32 KB token, at its column"  1 "ident.ptx:4:36: error: a token of 32768 characters; ptxlab takes tokens of at most 8192 (nvJitLink fails on longer ones)" "$P" check --no-twins "$L/ident.ptx"
expect "limit: a 100 KB token"                1 "ident100k.ptx:4:36: error: a token of 100000 characters"  "$P" check --no-twins "$L/ident100k.ptx"
expect "limit: a 100 KB entry name"           1 "entry.ptx:4:17: error: a token of 100001 characters"     "$P" check --no-twins "$L/entry.ptx"
expect "limit: a 100 KB string literal"       1 "string.ptx:4:9: error: a token of 100002 characters"      "$P" check --no-twins "$L/string.ptx"
expect "limit: 8192, nvJitLink's own log"     1 "at_limit.ptx:4: error: Unknown symbol 'AAAA"              "$P" check --no-twins "$L/at_limit.ptx"
expect "limit: 100 KB comments are fine"      0 "comments.ptx: ok"                                         "$P" check --no-twins "$L/comments.ptx"
expect "limit: ld.param, 200 000 spaces"      0 "spaces.ptx: ok"                                           "$P" check --no-twins "$L/spaces.ptx"
expect "limit: sass refuses a long token"     2 "ident.ptx:4:36: error: a token of 32768 characters"      PTXLAB_NVDISASM="$fake" "$P" sass "$L/ident.ptx"
expect "limit: train --ptx-dir, before GPU"   2 "forward.ptx:4:36: error: a token of 32768 characters"    $nogpu "$P" train --ptx-dir "$L/dir"
expect "limit: bench --ptx-dir, before GPU"   2 "forward.ptx:4:36: error: a token of 32768 characters"    $nogpu "$P" bench --ptx-dir "$L/dir"

# Contract files: `ptxlab new` writes a good one; each case changes one line of a copy.
mkdir "$t/c"
"$P" new mine --dir "$t/c" >/dev/null
C=$t/c
variant() { printf '%s\n' "$2" >"$t/sed"; sed -f "$t/sed" "$C/mine.ptx" >"$C/$1.ptx"; }  # a script file: no ARG_MAX
variant block2048  's|^//   block    256$|//   block    2048|'
variant block3d    's|^//   block    256$|//   block    1024, 1, 2|'
variant blockmin   's|^//   block    256$|//   block    min(N, 2048)|'
variant gridfrac   's|^//   grid     ceil(N / 256)$|//   grid     N / 256|'
variant gridy      's|^//   grid     ceil(N / 256)$|//   grid     1, 70000|'
variant shared     's|^//   block    256$|//   block    256\n//   shared   300000|'
variant length     's|^//   param    y  out  f32\[N\]$|//   param    y  out  f32[N*N*N*N*N]|'
variant length64   's|^//   param    y  out  f32\[N\]$|//   param    y  out  f32[N*N*N*N*N*N*N]|'
variant u32        's|^//   param    n  u32 = N$|//   param    n  u32 = N*4294967296|'
variant shapebig   's|^//   shape    N=1$|//   shape    N=99999999999|'
variant twinmiss   's|^//   twin     reference/mine.cu$|//   twin     reference/none.cu|'
variant twindir    's|^//   twin     reference/mine.cu$|//   twin     reference/dir.cu|'
variant twinfifo   's|^//   twin     reference/mine.cu$|//   twin     reference/fifo.cu|'
variant twinbad    's|^//   twin     reference/mine.cu$|//   twin     reference/bad.cu|'
variant noasm      's|^    ret;$|    bogus;\n    ret;|'
variant why        "s|^//   compare  bitwise\$|//   compare  ulp 2\n//   why      $(tok 150000 w)|"
variant longgrid   "s|^//   grid     ceil(N / 256)\$|//   grid     ceil(N / 256) $(tok 5000 ' ')|"
variant longtok    "s|^    ret;\$|    mov.u32 %r1, $(tok 32768 A);\n    ret;|"
mkdir "$C/reference/dir.cu"; mkfifo "$C/reference/fifo.cu"
{ cat "$C/reference/mine.cu"; echo 'this is not CUDA;'; } >"$C/reference/bad.cu"
expect "contract: check block 2048"        1 "block2048.ptx:24: error: block.x = \`2048\` is 2048 at N=1000, outside [1, 1024] (a block has at most 1024 threads)" "$P" check "$C/block2048.ptx"
expect "contract: check block 1024,1,2"    1 "block3d.ptx:24: error: block 1024x1x2 has 2048 threads at N=1000; a block has at most 1024 threads" "$P" check "$C/block3d.ptx"
expect "contract: check every shape"       1 "blockmin.ptx:24: error: block.x = \`min(N, 2048)\` is 2048 at N=100003" "$P" check "$C/blockmin.ptx"
expect "contract: check grid not whole"    1 "gridfrac.ptx:23: error: grid.x = \`N / 256\` is 125/32, not a whole number at N=1000; write ceil(N / 256)" "$P" check "$C/gridfrac.ptx"
expect "contract: check grid.y 70000"      1 "gridy.ptx:23: error: grid.y = \`70000\` is 70000 at N=1000, outside [1, 65535]" "$P" check "$C/gridy.ptx"
expect "contract: check shared 300000"     1 "shared.ptx:25: error: shared = \`300000\` is 300000 at N=1000, outside [0, 232448] (227 KiB" "$P" check "$C/shared.ptx"
expect "contract: check length > 2^32"     1 "length.ptx:18: error: the length of 'y' = \`N*N*N*N*N\` is 1000000000000000 at N=1000, outside [1, 4294967296] (overflows" "$P" check "$C/length.ptx"
expect "contract: check length > 2^63"     1 "length64.ptx:18: error: the length of 'y' = \`N*N*N*N*N*N*N\`: overflows 64-bit integers" "$P" check "$C/length64.ptx"
expect "contract: check u32 out of range"  1 "u32.ptx:20: error: parameter 'n' = \`N*4294967296\` is 4294967296000 at N=1000, outside [0, 4294967295] (out of u32 range)" "$P" check "$C/u32.ptx"
expect "contract: check shape too large"   1 "shapebig.ptx:16: error: shape: N=99999999999 is too large, outside 1 .. 2^31" "$P" check "$C/shapebig.ptx"
expect "contract: check a long grid line"  1 "longgrid.ptx:23: error: a \`grid\` line of 5028 characters; ptxlab takes contract lines of at most 4096" "$P" check "$C/longgrid.ptx"
expect "contract: a 150 KB why line"       0 "why.ptx: ok"                                         "$P" check "$C/why.ptx"
expect "contract: verify, 150 KB why, GPU" 3 "needs an NVIDIA GPU"                                 $nogpu "$P" verify "$C/why.ptx"
expect "contract: verify block 2048"       2 "block2048.ptx:24: error: block.x = \`2048\` is 2048 at N=1000" $nogpu "$P" verify "$C/block2048.ptx"
expect "contract: bench length > 2^32"     2 "length.ptx:18: error: the length of 'y'"            $nogpu "$P" bench "$C/length.ptx"
expect "contract: bench u32 out of range"  2 "(out of u32 range)"                                  $nogpu "$P" bench "$C/u32.ptx"
expect "contract: verify --shape too large" 2 "--shape: N=99999999999 is too large, outside 1 .. 2^31" $nogpu "$P" verify "$C/mine.ptx" --shape N=99999999999
expect "contract: verify at --shape only"  2 "is 2048 at N=5000, outside [1, 1024]"               $nogpu "$P" verify "$C/blockmin.ptx" --shape N=5000
expect "contract: verify twin missing"     2 "twinmiss.ptx:25: error: the twin $C/reference/none.cu does not exist" $nogpu "$P" verify "$C/twinmiss.ptx"
expect "contract: verify twin a directory" 2 "twindir.ptx:25: error: the twin $C/reference/dir.cu is a directory" $nogpu "$P" verify "$C/twindir.ptx"
expect "contract: bench twin a FIFO"       2 "twinfifo.ptx:25: error: the twin $C/reference/fifo.cu is a FIFO, not a regular file" $nogpu "$P" bench "$C/twinfifo.ptx"
expect "contract: verify twin not compiling" 2 "twinbad.ptx:25: error: the twin $C/reference/bad.cu does not compile" $nogpu "$P" verify "$C/twinbad.ptx"
expect "contract: bench PTX not assembling" 2 "noasm.ptx:74: error: Not a name of any known instruction: 'bogus'" $nogpu "$P" bench "$C/noasm.ptx"
expect "contract: new, a 100 KB name"       2 "is 100000 characters long; ptxlab new takes at most 64" "$P" new "$(tok 100000 a)" --dir "$t"
expect "contract: verify a 32 KB token"    2 "longtok.ptx:74:18: error: a token of 32768 characters" $nogpu "$P" verify "$C/longtok.ptx"
# ---- checkpoints, round two (#34) ----------------------------------------------
# Checkpoints as train --save writes them for the 4-3-10 network the tiny dataset fits, at
# --batch 1 (2 steps an epoch) and the default recipe (Nesterov: one buffer of optimizer state),
# at step 3 (step 1 of epoch 2), then copies that disagree with their own metadata or the run.
# Each is refused with exit 2 before the GPU is looked for ($nogpu); the good one reaches it.
if command -v python3 >/dev/null; then
python3 - "$t" <<'PY'
import json, struct, sys
t = sys.argv[1]

def write(name, tensors, meta):
    """A safetensors file as ptxlab writes it: tensors (name, shape, floats written), metadata."""
    header, data = {"__metadata__": meta}, b""
    for n, shape, count in tensors:
        header[n] = {"dtype": "F32", "shape": shape, "data_offsets": [len(data), len(data) + 4 * count]}
        data += struct.pack("<%df" % count, *[0.125] * count)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(f"{t}/{name}", "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)

def mlp(sizes):
    out = []
    for l in range(len(sizes) - 1):
        out += [(f"fc{l + 1}.weight", [sizes[l + 1], sizes[l]], sizes[l + 1] * sizes[l]),
                (f"fc{l + 1}.bias", [sizes[l + 1]], sizes[l + 1])]
    return out

P = 4 * 3 + 3 + 3 * 10 + 10
meta = {"format": "pt", "layers": "4,3,10", "train.layers": "4,3,10", "train.batch": "1", "train.lr": "0.1",
        "train.epochs": "5", "train.seed": "1", "train.init": "torch", "train.loss": "ce", "train.activation": "relu",
        "train.optimizer": "nesterov (momentum 0.9), weight decay 0",
        "train.schedule": "onecycle (linear decay to 0), linear warm-up from 0 over 20% of the steps, step every 0 epochs",
        "resume.step": "3", "resume.epoch": "2", "resume.k": "1", "resume.epoch_rng": "12345", "resume.reached": "0",
        "resume.target_step": "0", "resume.train_ms": "1.5", "resume.train_ms_to_target": "0"}
state = [("optimizer.state1", [P], P)]
def edit(**changes):
    m = dict(meta)
    for k, v in changes.items():
        k = k.replace("__", ".")
        if v is None: m.pop(k)
        else: m[k] = v
    return m

write("ck_ok.safetensors", mlp([4, 3, 10]) + state, meta)
# tensors against metadata
write("ck_layers.safetensors", mlp([4, 3, 10]) + state, edit(layers="4,8,10"))
write("ck_784.safetensors", mlp([784, 16, 10]), {"format": "pt", "layers": "784,128,10"})
write("ck_train_layers.safetensors", mlp([4, 3, 10]) + state, edit(train__layers="4,8,10"))
write("ck_no_fc.safetensors", state, {"format": "pt"})
write("ck_overflow.safetensors", mlp([4, 3, 10]) + [("optimizer.big", [1 << 30, 1 << 30, 4], 0)], {"format": "pt"})
write("ck_model.safetensors", [("conv1.weight", [4, 1, 3, 3], 36), ("conv1.bias", [4], 4),
                               ("fc1.weight", [10, 8], 80), ("fc1.bias", [10], 10)],
      {"format": "pt", "model": "conv8,pool,fc10", "input": "1x2x2"})
write("ck_model_input.safetensors", [], {"format": "pt", "model": "conv8,pool,fc10", "input": "4096x1024x1"})
# the optimizer state
write("ck_no_state.safetensors", mlp([4, 3, 10]), meta)
write("ck_short_state.safetensors", mlp([4, 3, 10]) + [("optimizer.state1", [P - 1], P - 1)], meta)
write("ck_adam.safetensors", mlp([4, 3, 10]) + state,
      edit(train__optimizer="adam (betas 0.9, 0.999, eps 1e-08), weight decay 0"))
write("ck_extra_state.safetensors", mlp([4, 3, 10]) + state + [("optimizer.state2", [P], P)], meta)
# the position
write("ck_k_huge.safetensors", mlp([4, 3, 10]) + state, edit(resume__k="999999999"))
write("ck_epoch_77.safetensors", mlp([4, 3, 10]) + state, edit(resume__epoch="77"))
write("ck_k_past.safetensors", mlp([4, 3, 10]) + state, edit(resume__epoch="1", resume__k="3", resume__step="3"))
write("ck_step_off.safetensors", mlp([4, 3, 10]) + state, edit(resume__step="4"))
write("ck_target.safetensors", mlp([4, 3, 10]) + state, edit(resume__reached="1", resume__target_step="9"))
# the values
write("ck_step_text.safetensors", mlp([4, 3, 10]) + state, edit(resume__step="12abc"))
write("ck_k_range.safetensors", mlp([4, 3, 10]) + state, edit(resume__k="4294967296"))
write("ck_reached.safetensors", mlp([4, 3, 10]) + state, edit(resume__reached="7"))
write("ck_ms.safetensors", mlp([4, 3, 10]) + state, edit(resume__train_ms="nan"))
write("ck_no_k.safetensors", mlp([4, 3, 10]) + state, edit(resume__k=None))
PY
resume=("$P" train --layers 4,3,10 --batch 1 --data "$t/data" --resume)
eval_=("$P" eval --data "$t/data" --load)
expect "ckpt2: train, a good one"         3 "no NVIDIA driver found"                            $nogpu "${resume[@]}" "$t/ck_ok.safetensors"
expect "ckpt2: eval, a good one"          3 "no NVIDIA driver found"                            $nogpu "${eval_[@]}" "$t/ck_ok.safetensors"
expect "ckpt2: --model cnn resumes a 4,3,10" 2 "was trained with layers 4,3,10, this run asks for layers conv32,pool" $nogpu "$P" train --model cnn --batch 1 --epochs 5 --lr 0.1 --target 0.98 --data "$t/data" --resume "$t/ck_ok.safetensors"
expect "ckpt2: 4 fc layers resume a 4,3,10" 2 "was trained with layers 4,3,10, this run asks for layers fc64,fc32,fc16,fc10" $nogpu "$P" train --layers 784,64,32,16,10 --batch 1 --data "$t/data" --resume "$t/ck_ok.safetensors"
expect "ckpt2: eval, layers vs tensors"   2 "its metadata 'layers' is '4,8,10' but its tensors hold the network 4,3,10" $nogpu "${eval_[@]}" "$t/ck_layers.safetensors"
expect "ckpt2: train, layers vs tensors"  2 "its metadata 'layers' is '4,8,10' but its tensors hold the network 4,3,10" $nogpu "${resume[@]}" "$t/ck_layers.safetensors"
expect "ckpt2: eval, 784-16-10 as 128"    2 "its metadata 'layers' is '784,128,10' but its tensors hold the network 784,16,10" $nogpu "${eval_[@]}" "$t/ck_784.safetensors"
expect "ckpt2: train, train.layers"       2 "its metadata 'train.layers' is '4,8,10' but its tensors hold the network 4,3,10" $nogpu "${resume[@]}" "$t/ck_train_layers.safetensors"
expect "ckpt2: eval, no fc tensors"       2 "no fc1.weight / fc1.bias tensors: not a ptxlab checkpoint? it holds: optimizer.state1" $nogpu "${eval_[@]}" "$t/ck_no_fc.safetensors"
expect "ckpt2: train, no fc tensors"      2 "no fc1.weight / fc1.bias tensors: not a ptxlab checkpoint? it holds: optimizer.state1" $nogpu "${resume[@]}" "$t/ck_no_fc.safetensors"
expect "ckpt2: eval, 2^64 bytes"          2 "tensor 'optimizer.big': shape [1073741824, 1073741824, 4] has too many elements" $nogpu "${eval_[@]}" "$t/ck_overflow.safetensors"
expect "ckpt2: eval, model vs tensors"    2 "tensor 'conv1.weight' has the shape [4, 1, 3, 3]; the model 'conv8,pool,fc10' needs [8, 1, 3, 3]" $nogpu "${eval_[@]}" "$t/ck_model.safetensors"
expect "ckpt2: eval, model's input"       2 "its metadata 'input' is '4096x1024x1': 4194304 values an image, at most 1048576" $nogpu "${eval_[@]}" "$t/ck_model_input.safetensors"
expect "ckpt2: train, no optimizer state" 2 "its optimizer nesterov keeps 1 state buffer of 55 floats, but it has no tensor 'optimizer.state1'" $nogpu "${resume[@]}" "$t/ck_no_state.safetensors"
expect "ckpt2: eval, no optimizer state"  2 "its optimizer nesterov keeps 1 state buffer of 55 floats, but it has no tensor 'optimizer.state1'" $nogpu "${eval_[@]}" "$t/ck_no_state.safetensors"
expect "ckpt2: train, short state"        2 "tensor 'optimizer.state1' holds 54 floats; its optimizer nesterov keeps one per parameter, 55" $nogpu "${resume[@]}" "$t/ck_short_state.safetensors"
expect "ckpt2: eval, adam's one buffer"   2 "its optimizer adam keeps 2 state buffers of 55 floats, but it has no tensor 'optimizer.state2'" $nogpu "${eval_[@]}" "$t/ck_adam.safetensors"
expect "ckpt2: train, adam's one buffer"  2 "its optimizer adam keeps 2 state buffers of 55 floats, but it has no tensor 'optimizer.state2'" $nogpu "${resume[@]}" "$t/ck_adam.safetensors" --optimizer adam
expect "ckpt2: train, a state too many"   2 "tensor 'optimizer.state2' is not a state buffer of its optimizer nesterov (which keeps 1)" $nogpu "${resume[@]}" "$t/ck_extra_state.safetensors"
expect "ckpt2: train, resume.k 999999999" 2 "its position does not add up: 3 steps done ('resume.step') at step 999999999 of epoch 2" $nogpu "${resume[@]}" "$t/ck_k_huge.safetensors"
expect "ckpt2: eval, resume.k 999999999"  2 "its position does not add up" $nogpu "${eval_[@]}" "$t/ck_k_huge.safetensors"
expect "ckpt2: train, epoch 77 of 5"      2 "its metadata 'resume.epoch' is 77, outside the 5 epochs of its schedule" $nogpu "${resume[@]}" "$t/ck_epoch_77.safetensors"
expect "ckpt2: eval, epoch 77 of 5"       2 "its metadata 'resume.epoch' is 77, outside the 5 epochs of its schedule" $nogpu "${eval_[@]}" "$t/ck_epoch_77.safetensors"
expect "ckpt2: train, k past the data"    2 "the checkpoint's position (epoch 1, step 3 of 2, 3 steps done) does not fit 5 epochs of 2 steps (2 training samples in batches of 1)" $nogpu "${resume[@]}" "$t/ck_k_past.safetensors"
expect "ckpt2: train, steps vs the data"  2 "the checkpoint's position (epoch 2, step 1 of 2, 4 steps done) does not fit 5 epochs of 2 steps" $nogpu "${resume[@]}" "$t/ck_step_off.safetensors"
expect "ckpt2: eval, target after steps"  2 "its target entries do not add up: reached 1, at step 9" $nogpu "${eval_[@]}" "$t/ck_target.safetensors"
expect "ckpt2: train, resume.step text"   2 "its metadata 'resume.step' is '12abc', not a whole number" $nogpu "${resume[@]}" "$t/ck_step_text.safetensors"
expect "ckpt2: eval, resume.k range"      2 "its metadata 'resume.k' is 4294967296, past 4294967295" $nogpu "${eval_[@]}" "$t/ck_k_range.safetensors"
expect "ckpt2: train, resume.reached 7"   2 "its metadata 'resume.reached' is 7, past 1" $nogpu "${resume[@]}" "$t/ck_reached.safetensors"
expect "ckpt2: eval, resume.train_ms nan" 2 "its metadata 'resume.train_ms' is 'nan', not a time in ms" $nogpu "${eval_[@]}" "$t/ck_ms.safetensors"
expect "ckpt2: train, no resume.k"        2 "its metadata has no 'resume.k'" $nogpu "${resume[@]}" "$t/ck_no_k.safetensors"
else
  echo "skip  ckpt2: no python3 to write the checkpoints"; skips=$((skips + 1))
fi

expect "bench: --models, a bad layer"     2 "layer 3 'fc1o'"                                  $nogpu "$P" bench --models cnn fc256,fc128,fc1o
expect "bench: --models with --no-steps"  2 "--no-steps skips the step timings: give one of them" $nogpu "$P" bench --no-steps --models cnn
expect "bench: --models, one layer"       2 "--models fc10: the model trainer's step takes 2 layers or more" $nogpu "$P" bench --models fc10
expect "bench: --model-batch 0"           2 "--model-batch must be 1 to 16384, got 0"          $nogpu "$P" bench --model-batch 0
expect "bench: --model-batch too large"   2 "--model-batch must be 1 to 16384, got 16385"      $nogpu "$P" bench --model-batch 16385
expect "bench: --model-batch, --no-steps" 2 "which --no-steps skips"                           $nogpu "$P" bench --no-steps --model-batch 256
expect "bench: --model-batch, --headline" 2 "--model-batch does not go with --headline"       $nogpu "$P" bench --headline --model-batch 256
expect "bench: --models, good ones"       3 "no NVIDIA driver found"                          $nogpu "$P" bench --models cnn fc256,fc128,fc10
echo "bad inputs: $passes ok, $fails failed, $skips skipped"
[ "$fails" = 0 ]
