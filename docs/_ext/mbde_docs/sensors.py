"""The sensor YAML reference, from the sensor loader's schema."""
from __future__ import annotations

from mbde_docs.md import code, section_table, table


def markdown() -> str:
    from mbde_core.config.schema import Section
    from mbde_core.sensors import schema

    out = ["Generated from `mbde_core/sensors/schema.py`, the table the sensor loader checks every "
           "entry against. A `sensors:` list lives in a scenario, a mechanism file, or a file of "
           "its own (`sensors_file:`, `--sensors`, the nodes' `sensors_file`) holding a top-level "
           "`sensors:` list. The body frame is the mechanism YAML's: origin at the body's first "
           "point, x towards its second point, y to the left (counter-clockwise).\n",
           "## Every sensor\n", section_table(schema.COMMON_KEYS),
           "## Noise\n", schema.NOISE.doc + "\n", section_table(schema.NOISE),
           "## Types\n",
           table(["type", "reads", "channels"], [[code(t), reads, ch] for t, (reads, ch, _) in schema.TYPES.items()])]
    for kind, (reads, _, keys) in schema.TYPES.items():
        out += [f"### `{kind}`\n", f"Reads {reads}.\n",
                section_table(Section(f"sensors[i] ({kind})", kind, "", keys))]
    return "\n".join(out)
