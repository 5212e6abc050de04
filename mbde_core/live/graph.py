"""The node graph of the simulated loop: ONE definition for ``launch/sim_demo.launch.py``
and ``mbde live`` (ROS-free: plain data).

:func:`sim_demo_nodes` lists the nodes with the parameters each gets on top of its
parameter file ``config/params/<node>.yaml``: ``mechanism_model`` and ``simulator`` on the
scenario (the simulator publishes ``/clock`` and waits for one subscriber per topic),
``imu_driver`` and ``encoder_driver`` (model from ``/mbde/description``), and one
``estimator`` per observer, named after it in namespace ``/mbde``; every node but the
simulator runs on simulated time.
"""
from __future__ import annotations

from dataclasses import dataclass, field

# launch arguments shared by the launch file and `mbde live` (name -> default, as text)
SIM_DEMO_DEFAULTS = {
    "scenario": "scenarios/pf_sim.yaml",
    "estimators": "pf,ukf,errorekf,adekf",
    "config": "",
    "real_time_factor": "1.0",
    "loop": "true",
}


@dataclass(frozen=True)
class NodeSpec:
    """One node process: ``node`` = module of mbde_nodes and parameter-file name."""

    node: str
    name: str
    namespace: str = ""
    parameters: dict = field(default_factory=dict)

    @property
    def executable(self) -> str:
        """The console script (``mbde-estimator``), see mbde_nodes.entry."""
        return "mbde-" + self.node.replace("_", "-")

    @property
    def fully_qualified_name(self) -> str:
        return f"/{self.namespace}/{self.name}" if self.namespace else f"/{self.name}"


def _bool(value) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text not in ("true", "false", "1", "0", "yes", "no"):
        raise ValueError(f"expected true or false, got {value!r}")
    return text in ("true", "1", "yes")


def estimator_names(estimators) -> list[str]:
    """'pf, ukf' or ['pf', 'ukf'] -> ['pf', 'ukf']."""
    items = estimators.split(",") if isinstance(estimators, str) else list(estimators)
    return [n.strip() for n in items if n.strip()]


def sim_demo_nodes(scenario=SIM_DEMO_DEFAULTS["scenario"], estimators=SIM_DEMO_DEFAULTS["estimators"],
                   config=SIM_DEMO_DEFAULTS["config"], real_time_factor=SIM_DEMO_DEFAULTS["real_time_factor"],
                   loop=SIM_DEMO_DEFAULTS["loop"], settings=()) -> list[NodeSpec]:
    """The nodes of the simulated loop (values may be launch-argument text); settings:
    scenario overrides 'key.path=value' for the model and the simulator alike."""
    sim_time = {"use_sim_time": True}
    scen = {"scenario_file": str(scenario)}
    if settings:
        scen["settings"] = [str(v) for v in settings]
    nodes = [
        NodeSpec("mechanism_model", "mechanism_model", "", {**scen, **sim_time}),
        NodeSpec("simulator", "simulator", "", {**scen, "publish_clock": True,
                                                "loop": _bool(loop), "real_time_factor": float(real_time_factor),
                                                "wait_for_subscribers": 1}),
        NodeSpec("imu_driver", "imu_driver", "", dict(sim_time)),
        NodeSpec("encoder_driver", "encoder_driver", "", dict(sim_time)),
    ]
    for name in estimator_names(estimators):
        nodes.append(NodeSpec("estimator", name, "mbde", {"estimator": name, "config_file": str(config), **sim_time}))
    return nodes
