"""mbde bag-info DIR: topics, types, counts, rates and duration of a ROS 2 bag."""
from __future__ import annotations

from mbde_core.rosio.bag import bag_info

HELP = "list a ROS 2 bag's topics, types, message counts, rates and duration"
DESCRIPTION = """Summarise a rosbag2 bag directory (sqlite3 or mcap storage): storage and
format version, duration, and per topic its message type, message count and mean rate
(Hz, (count - 1) / (last - first stamp)). A missing, truncated or corrupt bag gives a
one-line error and exit status 2."""


def add_arguments(p):
    p.add_argument("bag", help="bag directory (holding metadata.yaml)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")


def run(args) -> int:
    import json

    info = bag_info(args.bag)
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    print(f"bag: {info['path']}  ({info['storage']}, rosbag2 format {info['version']})")
    if info["message_count"]:
        print(f"duration: {info['duration']:.6f} s  (start {info['start']:.9f} s, end {info['end']:.9f} s), "
              f"{info['message_count']} messages")
    else:
        print("duration: 0 s (empty bag)")
    rows = [(t["topic"], t["type"], str(t["count"]), "-" if t["rate_hz"] is None else f"{t['rate_hz']:.3f}")
            for t in info["topics"]]
    head = ("topic", "type", "count", "rate [Hz]")
    widths = [max(len(r[i]) for r in rows + [head]) for i in range(4)]
    fmt = f"  {{:<{widths[0]}}}  {{:<{widths[1]}}}  {{:>{widths[2]}}}  {{:>{widths[3]}}}"
    print(fmt.format(*head))
    for r in rows:
        print(fmt.format(*r))
    return 0
