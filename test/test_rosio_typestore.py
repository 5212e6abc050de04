"""The typestore registers mbde_msgs from the .msg files, found in all supported places."""
import shutil
from pathlib import Path

import pytest

from mbde_core.errors import DataError
from mbde_core.rosio import typestore as ts
from mbde_core.rosio.factory import RosbagsFactory

REPO_MSG = Path(__file__).resolve().parents[1] / "mbde_msgs" / "msg"


def field_names(store, typename):
    return [name for name, _ in ts.fielddefs(store)[typename][1]]


def test_cached_store_has_standard_and_mbde_types():
    store = ts.get_typestore()
    assert ts.get_typestore() is store
    for name in ("sensor_msgs/msg/Imu", "sensor_msgs/msg/JointState", "std_msgs/msg/String",
                 "builtin_interfaces/msg/Time", ts.MECHANISM_STATE, ts.PARTICLE_SET):
        assert name in store.types


def test_fields_follow_the_msg_files():
    store = ts.get_typestore()
    for typename in (ts.MECHANISM_STATE, ts.PARTICLE_SET):
        text = (REPO_MSG / (typename.rsplit("/", 1)[1] + ".msg")).read_text()
        declared = [line.split("#")[0].split()[1] for line in text.splitlines()
                    if line.split("#")[0].strip() and "=" not in line.split("#")[0]]  # not constants
        assert field_names(store, typename) == declared
    assert field_names(store, ts.PARTICLE_SET)[:4] == ["header", "num_particles", "dof",
                                                       "independent_names"]


def test_repo_checkout_is_found_first():
    assert ts.find_msg_dir() == REPO_MSG


def copy_msgs(dst: Path) -> Path:
    dst.mkdir(parents=True)
    for f in REPO_MSG.glob("*.msg"):
        shutil.copy(f, dst)
    return dst


def test_installed_data_files_then_ament_prefix(tmp_path, monkeypatch):
    monkeypatch.setattr(ts, "__file__", str(tmp_path / "site" / "mbde_core" / "rosio" / "x.py"))
    monkeypatch.setattr(ts.sys, "prefix", str(tmp_path / "venv"))
    monkeypatch.setenv("AMENT_PREFIX_PATH", f"{tmp_path / 'ws1'}:{tmp_path / 'ws2'}")
    with pytest.raises(DataError, match="not found; searched") as info:
        ts.find_msg_dir()
    assert "\n" not in str(info.value) and str(tmp_path / "ws2") in str(info.value)
    ament = copy_msgs(tmp_path / "ws2" / "share" / "mbde_msgs" / "msg")
    assert ts.find_msg_dir() == ament
    installed = copy_msgs(tmp_path / "venv" / "share" / "mbde" / "msg")
    assert ts.find_msg_dir() == installed


def test_definitions_are_read_not_hardcoded(tmp_path):
    msg_dir = copy_msgs(tmp_path / "msg")
    with open(msg_dir / "ParticleSet.msg", "a") as fh:
        fh.write("float64 resampling_threshold   # test-only field\n")
    store = ts.build_typestore(msg_dir)
    assert field_names(store, ts.PARTICLE_SET)[-1] == "resampling_threshold"
    assert RosbagsFactory(store).new(ts.PARTICLE_SET).resampling_threshold == 0.0
    assert "resampling_threshold" not in field_names(ts.get_typestore(), ts.PARTICLE_SET)


def test_invalid_definition_is_a_one_line_data_error(tmp_path):
    msg_dir = copy_msgs(tmp_path / "msg")
    (msg_dir / "ParticleSet.msg").write_text("float64[ z\nthis is not a message\n")
    with pytest.raises(DataError, match="ParticleSet") as info:
        ts.build_typestore(msg_dir)
    assert "\n" not in str(info.value)
