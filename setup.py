"""mbde: multibody-dynamics-based state estimation (ROS 2 ament_python package)."""
import os
from glob import glob

from setuptools import find_packages, setup

PACKAGE = "mbde"


def tree(folder):
    """data_files entries installing `folder` recursively under share/mbde/<folder>."""
    out = {}
    for path in glob(os.path.join(folder, "**", "*"), recursive=True):
        if os.path.isfile(path):
            out.setdefault(os.path.join("share", PACKAGE, os.path.dirname(path)), []).append(path)
    return sorted(out.items())


CLUSTER = ["dask>=2023.1", "distributed>=2023.1"]
# the documentation site (docs/, `make docs`): Sphinx with MyST Markdown, the toolchain
# rosdoc2 uses for ROS 2 packages; the test suite builds it (test/test_docs.py)
DOCS = ["sphinx>=7.2,<10", "myst-parser>=3,<6"]

NODES = [
    # (executable, module:function) -- the ROS 2 nodes of mbde_nodes, prefixed "mbde-"
    # (`ros2 run mbde mbde-estimator`; a pip install puts them on PATH next to `mbde`).
    # The entry points say in one line when ROS 2 is missing (mbde_nodes/entry.py).
    ("mbde-mechanism-model", "mbde_nodes.entry:mechanism_model"),
    ("mbde-simulator", "mbde_nodes.entry:simulator"),
    ("mbde-imu-driver", "mbde_nodes.entry:imu_driver"),
    ("mbde-encoder-driver", "mbde_nodes.entry:encoder_driver"),
    ("mbde-estimator", "mbde_nodes.entry:estimator"),
]

setup(
    name=PACKAGE,
    version="0.1.0",
    description="Multibody-dynamics-based state estimation for planar mechanisms (ROS 2)",
    license="BSD-3-Clause",
    python_requires=">=3.10",
    packages=find_packages(include=["mbde_core", "mbde_core.*", "mbde_nodes", "mbde_nodes.*", "mbde_bench", "mbde_bench.*"]),
    include_package_data=True,
    package_data={"mbde_core": ["data/*", "data/**/*"]},
    data_files=[
        ("share/ament_index/resource_index/packages", ["resource/" + PACKAGE]),
        ("share/" + PACKAGE, ["package.xml"]),
        # the mbde_msgs definitions, read at run time by the ROS-free bag code
        ("share/" + PACKAGE + "/msg", sorted(glob("mbde_msgs/msg/*.msg"))),
    ]
    + tree("config")
    + tree("launch")
    + tree("rviz"),
    install_requires=[
        "numpy>=1.21",
        "scipy>=1.8",
        "pyyaml>=5.4",
        "rosbags>=0.10.10,<0.12",
        "matplotlib>=3.5",
        "tqdm>=4.60",
        # the particle filter's RK4 propagation on all cores (mbde_core/engine/numba_kernels.py);
        # without it the numpy path runs (same results)
        "numba>=0.60",
        # one BLAS thread for the estimators' small matrices in library use (mbde_core/estimators/blas_threads.py)
        "threadpoolctl>=3.1,<4",
    ],
    extras_require={
        # run replays and benchmarks on a Dask distributed cluster (--scheduler tcp://HOST:PORT)
        "cluster": CLUSTER,
        "docs": DOCS,
        # `mbde export --format parquet` (CSV needs nothing)
        "parquet": ["pyarrow>=12,<23"],
        "test": [
            "pytest>=7",
            "mcap>=1.1",
            "mcap-ros2-support>=0.5",
            "filterpy==1.4.5",
            # the import contracts of .importlinter (test/test_layers.py)
            "import-linter>=2.1,<3",
        ] + CLUSTER + DOCS,  # the cluster tests start a distributed.LocalCluster; test_docs builds the site
    },
    entry_points={
        "console_scripts": ["mbde = mbde_core.cli:main"]
        + [f"{name} = {target}" for name, target in NODES],
        # subcommands of `mbde` that live outside the core (mbde_core/cli/main.py)
        "mbde.commands": ["bench = mbde_bench.cli"],
    },
    zip_safe=True,
)
